#include "common/source_forms.h"

#include <regex>

namespace kubetune {
namespace {

bool matches(const std::string& text, const char* pattern) {
  return std::regex_search(text, std::regex(pattern));
}

}  // namespace

bool looks_like_remote_source(const std::string& path) {
  return matches(path, kSourceSchemePattern);
}

bool is_local_or_remote_source(const std::string& path, bool model) {
  if (!looks_like_remote_source(path)) return true;
  const bool no_parent = path.find("..") == std::string::npos;
  const bool hub =
      model ? path.rfind("hf://datasets/", 0) != 0 && matches(path, kHubModelPattern)
            : (matches(path, kHubDatasetFilePattern) || matches(path, kHubDatasetSplitPattern)) &&
                  no_parent;
  return hub || (matches(path, kS3Pattern) && no_parent);
}

bool is_local_or_remote_output(const std::string& dir) {
  if (!looks_like_remote_source(dir)) return true;
  return matches(dir, kS3Pattern) && dir.find("..") == std::string::npos;
}

}  // namespace kubetune
