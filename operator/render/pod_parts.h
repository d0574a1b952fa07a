// Small builders of the pieces of a pod spec that the job's pods (desired_objects.cpp) and their
// fetch init container (sources.cpp) both write.
#pragma once

#include <optional>
#include <string>

#include "operator/kube/kube_types.h"

namespace kubetune::op {

// The resources a container asks for (client-go's corev1.ResourceCPU, ...).
inline constexpr const char* kResourceCpu = "cpu";
inline constexpr const char* kResourceMemory = "memory";
inline constexpr const char* kResourceGpu = "nvidia.com/gpu";

// The volumes of every job pod besides spec.volumes: the trainer's config, and /dev/shm.
inline constexpr const char* kConfigVolume = "kubetune-config";
inline constexpr const char* kShmVolume = "kubetune-shm";

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

inline k8s::Volume empty_dir(const std::string& name) {
  k8s::Volume v;
  v.name = name;
  v.empty_dir = k8s::EmptyDirVolumeSource{};
  return v;
}

}  // namespace kubetune::op
