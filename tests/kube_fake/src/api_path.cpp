#include "api_path.h"

#include <sstream>
#include <vector>

namespace kubetune::kubefake {

static std::vector<std::string> split_segments(const std::string& path) {
  std::vector<std::string> segments;
  std::stringstream in(path);
  std::string segment;
  while (std::getline(in, segment, '/')) {
    if (!segment.empty()) segments.push_back(segment);
  }
  return segments;
}

// Resolves what follows /api/v1 or /apis/{group}/{version}.
static std::optional<ApiPath> parse_rest(ApiPath result, std::vector<std::string> rest) {
  if (rest.empty()) return std::nullopt;
  // "namespaces/{ns}/{plural}..." is a namespaced path; "namespaces/{name}[/status]" is the
  // cluster-scoped Namespace object itself.
  bool namespaced_form =
      rest[0] == "namespaces" && rest.size() >= 3 && rest[2] != "status" && rest[2] != "finalize";
  size_t first = 0;
  if (namespaced_form) {
    result.namespace_ = rest[1];
    first = 2;
  }
  size_t count = rest.size() - first;
  if (count < 1 || count > 3) return std::nullopt;
  result.plural = rest[first];
  if (count >= 2) result.name = rest[first + 1];
  if (count == 3) result.subresource = rest[first + 2];
  return result;
}

std::optional<ApiPath> parse_api_path(const std::string& path) {
  std::vector<std::string> segments = split_segments(path);
  ApiPath result;
  if (segments.size() >= 2 && segments[0] == "api") {
    result.version = segments[1];
    return parse_rest(result, {segments.begin() + 2, segments.end()});
  }
  if (segments.size() >= 3 && segments[0] == "apis") {
    result.group = segments[1];
    result.version = segments[2];
    return parse_rest(result, {segments.begin() + 3, segments.end()});
  }
  return std::nullopt;
}

}  // namespace kubetune::kubefake
