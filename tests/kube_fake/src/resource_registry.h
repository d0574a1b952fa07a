#pragma once
// Which resources the fake serves: the built-in types the operator touches plus registered
// custom resources. Thread-safe: tests may register resources while clients are connected.
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "kubetune/kubefake/resource_info.h"

namespace kubetune::kubefake {

struct Resource {
  ResourceInfo info;
  bool builtin = false;

  // Objects live in one store per group/plural, whatever version they were written through.
  std::string storage_key() const { return info.group + "/" + info.plural; }
  // Custom resources always carry metadata.generation; built-ins only when they have a status
  // subresource (the types whose controllers report observedGeneration).
  bool tracks_generation() const { return !builtin || info.has_status_subresource; }
  // Whether a PUT without metadata.resourceVersion is accepted. Custom resources and leases
  // refuse it (their strategies set AllowUnconditionalUpdate to false); most built-ins allow it.
  bool allows_unconditional_update() const { return builtin && info.plural != "leases"; }
};

class ResourceRegistry {
 public:
  ResourceRegistry();  // with the built-in resources
  void add(const ResourceInfo& info, bool builtin = false);
  std::optional<Resource> find(const std::string& group, const std::string& version,
                               const std::string& plural) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, Resource> by_path_;  // "group/version/plural"
};

}  // namespace kubetune::kubefake
