#pragma once
// Describes one kind of object the fake API server can store (a built-in type or a custom
// resource).
#include <string>

namespace kubetune::kubefake {

struct ResourceInfo {
  std::string group;    // "" for the core group (/api/v1), e.g. "kubetune.io" otherwise
  std::string version;  // e.g. "v1", "v1alpha1"
  std::string plural;   // path segment, e.g. "finetunejobs"
  std::string kind;     // e.g. "FineTuneJob"
  bool namespaced = true;
  bool has_status_subresource = false;

  // "v1" for the core group, "group/version" otherwise: the apiVersion field of objects.
  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
};

}  // namespace kubetune::kubefake
