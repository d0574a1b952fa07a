// REST paths of a kind of object: /api/v1/namespaces/ns/pods/name,
// /apis/kubetune.io/v1alpha1/namespaces/ns/finetunejobs/name/status.
#pragma once

#include <string>

namespace kubetune::op::kube {

struct Resource {
  std::string group;  // "" = core
  std::string version;
  std::string plural;
  bool namespaced = true;

  std::string api_version() const { return group.empty() ? version : group + "/" + version; }
  // `ns` "" = all namespaces (cluster-wide list/watch).
  std::string collection(const std::string& ns) const {
    std::string p = group.empty() ? "/api/" + version : "/apis/" + group + "/" + version;
    if (namespaced && !ns.empty()) p += "/namespaces/" + ns;
    return p + "/" + plural;
  }
  std::string item(const std::string& ns, const std::string& name) const {
    return collection(ns) + "/" + name;
  }
};

namespace resources {
inline const Resource kPods{"", "v1", "pods", true};
inline const Resource kServices{"", "v1", "services", true};
inline const Resource kConfigMaps{"", "v1", "configmaps", true};
inline const Resource kNodes{"", "v1", "nodes", false};
inline const Resource kEvents{"", "v1", "events", true};
inline const Resource kLeases{"coordination.k8s.io", "v1", "leases", true};
inline const Resource kFineTuneJobs{"kubetune.io", "v1alpha1", "finetunejobs", true};
// Kueue's (kueue.x-k8s.io/v1beta2, its storage version; v1beta1 needs Kueue's conversion webhook).
inline const Resource kWorkloads{"kueue.x-k8s.io", "v1beta2", "workloads", true};
inline const Resource kResourceFlavors{"kueue.x-k8s.io", "v1beta2", "resourceflavors", false};
inline const Resource kWorkloadPriorityClasses{"kueue.x-k8s.io", "v1beta2",
                                               "workloadpriorityclasses", false};
}  // namespace resources

}  // namespace kubetune::op::kube
