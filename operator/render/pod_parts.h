// Small builders of the pieces of a pod spec that the job's pods (desired_objects.cpp) and their
// fetch init container (sources.cpp) both write.
#pragma once

#include <optional>
#include <string>

#include "operator/kube/kube_types.h"

namespace kubetune::op {

inline k8s::EnvVar env_var(const std::string& name, const std::optional<std::string>& value) {
  k8s::EnvVar e;
  e.name = name;
  e.value = value;
  return e;
}

// `read_only` nullopt: the field is left out (the volume is mounted read-write).
inline k8s::VolumeMount volume_mount(const std::string& name, const std::string& path,
                                     std::optional<bool> read_only) {
  k8s::VolumeMount m;
  m.name = name;
  m.mount_path = path;
  m.read_only = read_only;
  return m;
}

}  // namespace kubetune::op
