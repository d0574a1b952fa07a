#pragma once
// Splits a request path into what it addresses, the way the apiserver's request-info resolver
// does: /api/v1/..., /apis/{group}/{version}/..., namespaced or cluster-wide, optional name and
// subresource.
#include <optional>
#include <string>

namespace kubetune::kubefake {

struct ApiPath {
  std::string group;  // "" for /api
  std::string version;
  std::string namespace_;  // "" when the path names no namespace
  std::string plural;
  std::string name;         // "" for collections
  std::string subresource;  // "" or "status"
};

// std::nullopt when the path is not a resource path at all (the caller answers 404).
std::optional<ApiPath> parse_api_path(const std::string& path);

}  // namespace kubetune::kubefake
