// One translation, two backends: what a FineTuneJob becomes. The Kubernetes backend (the
// reconciler) creates these objects; the local runner turns the pods into local processes.
// Pure functions of the job, so they are tested without any API server.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/job.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op {

struct DesiredObjects {
  k8s::ConfigMap config_map;  // <job>-config: config.json for `train --config`
  // <job>: headless, gives pod 0 a stable DNS name for the other pods' rendezvous. A gang of one
  // pod has none (its processes meet on 127.0.0.1): a third of the objects of the commonest job.
  std::optional<k8s::Service> service;
  std::vector<k8s::Pod> pods;  // <job>-worker-<rank>, rank = index
};

// `attempt` is the gang number (status.restarts): it labels the pods so leftovers of an earlier
// gang are recognised.
DesiredObjects desired_objects(const FineTuneJob& job, int attempt);

// `<job>-preflight`: kubetune-trainer preflight on a CPU (no GPU requested, none visible), with
// the workers' image, volumes, placement and security. Its compact report becomes the pod's
// termination message, read by the reconciler. `gpu_memory_gib`: one GPU's memory, when known.
// `attempt`: preflight pods that ended without a verdict before this one
// (status.preflight.failures), as kubetune.io/attempt.
k8s::Pod preflight_pod(const FineTuneJob& job, std::optional<double> gpu_memory_gib, int attempt);
// <job>-config, also desired_objects().config_map.
k8s::ConfigMap config_map(const FineTuneJob& job);
// The preflight's command line for the job (the pod's, and kubetune run's on this machine).
std::vector<std::string> preflight_command(const FineTuneJob& job, const std::string& config_path,
                                           std::optional<double> gpu_memory_gib);

std::string pod_name(const std::string& job, int rank);
std::string preflight_pod_name(const std::string& job);
std::string config_map_name(const std::string& job);
std::string service_name(const std::string& job);
// Pod 0's DNS name through the headless Service (127.0.0.1 in a gang of one pod): MASTER_ADDR of
// every rank.
std::string master_address(const FineTuneJob& job);

// The ownerReference that makes the API server delete an object with its job.
k8s::OwnerReference owner_reference(const FineTuneJob& job);
// True when the object with this metadata is controlled by the job with this uid. Children are
// recognised by this, never by name or label alone: a job re-created under the same name is
// another owner.
bool owned_by(const k8s::ObjectMeta& meta, const std::string& uid);

// The spec the workers run, hashed (FNV-1a, hex): runPolicy is left out, it changes no pod.
std::string spec_hash(const nlohmann::json& spec);

}  // namespace kubetune::op
