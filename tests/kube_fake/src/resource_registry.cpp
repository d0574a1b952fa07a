#include "resource_registry.h"

namespace kubetune::kubefake {

static std::string path_key(const std::string& group, const std::string& version,
                            const std::string& plural) {
  return group + "/" + version + "/" + plural;
}

ResourceRegistry::ResourceRegistry() {
  // group, version, plural, kind, namespaced, has_status_subresource
  add({"", "v1", "pods", "Pod", true, true}, true);
  add({"", "v1", "services", "Service", true, true}, true);
  add({"", "v1", "configmaps", "ConfigMap", true, false}, true);
  add({"", "v1", "events", "Event", true, false}, true);
  add({"", "v1", "namespaces", "Namespace", false, true}, true);
  add({"", "v1", "nodes", "Node", false, true}, true);
  add({"coordination.k8s.io", "v1", "leases", "Lease", true, false}, true);
  add({"apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", false,
       true},
      true);
}

void ResourceRegistry::add(const ResourceInfo& info, bool builtin) {
  std::lock_guard<std::mutex> lock(mu_);
  by_path_[path_key(info.group, info.version, info.plural)] = Resource{info, builtin};
}

std::optional<Resource> ResourceRegistry::find(const std::string& group, const std::string& version,
                                               const std::string& plural) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_path_.find(path_key(group, version, plural));
  if (it == by_path_.end()) return std::nullopt;
  return it->second;
}

}  // namespace kubetune::kubefake
