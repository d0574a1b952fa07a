#include "patch.h"

#include "api_error.h"

namespace kubetune::kubefake {
namespace {

nlohmann::json parse_patch(const std::string& body) {
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw bad_request(std::string("the body of the request is not valid JSON: ") + e.what());
  }
}

ApiError unsupported(const std::string& content_type) {
  return ApiError(415, "UnsupportedMediaType",
                  "the body of the request was in an unknown format - accepted media types "
                  "include: application/json-patch+json, application/merge-patch+json, "
                  "application/strategic-merge-patch+json (got \"" +
                      content_type + "\")");
}

}  // namespace

nlohmann::json apply_patch(const nlohmann::json& current, const std::string& content_type,
                           const std::string& patch_body) {
  // Merge patches only (the operator's); a JSON patch (RFC 6902) is refused as unknown here.
  bool merge = content_type == "application/merge-patch+json" ||
               content_type == "application/strategic-merge-patch+json";
  if (!merge) throw unsupported(content_type);
  nlohmann::json patch = parse_patch(patch_body);
  if (!patch.is_object()) throw bad_request("a merge patch body must be a JSON object");
  nlohmann::json result = current;
  result.merge_patch(patch);
  return result;
}

}  // namespace kubetune::kubefake
