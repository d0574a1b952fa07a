#include "operator/render/desired_objects.h"

#include <cstdint>
#include <cstdio>
#include <map>

#include "common/contracts.h"
#include "common/launch_contract.h"
#include "operator/render/pod_parts.h"
#include "operator/render/publish.h"
#include "operator/render/sources.h"

namespace kubetune::op {
namespace {

// Pods of a gang find rank 0 through a headless Service; the processes of one pod need none.
bool has_service(const FineTuneJob& job) { return job.spec.workers.replicas > 1; }

using nlohmann::json;

std::map<std::string, std::string> labels(const FineTuneJob& job) {
  return {{kLabelManagedBy, kManagerName},
          {"app.kubernetes.io/name", "kubetune"},
          {"app.kubernetes.io/instance", job.name},
          {kLabelJob, job.name}};
}

k8s::ObjectMeta metadata(const FineTuneJob& job, const std::string& name) {
  k8s::ObjectMeta meta;
  meta.name = name;
  meta.namespace_ = job.ns;
  meta.labels = labels(job);
  meta.owner_references = {owner_reference(job)};
  return meta;
}

int processes_per_pod(const FineTuneJob& job) {
  return job.spec.workers.gpus_per_worker > 0 ? job.spec.workers.gpus_per_worker : 1;
}

// A field of the pod itself (the downward API), filled in by the kubelet.
k8s::EnvVar field_env(const std::string& name, const std::string& field) {
  k8s::ObjectFieldSelector selector;
  selector.field_path = field;
  k8s::EnvVarSource source;
  source.field_ref = selector;
  k8s::EnvVar e;
  e.name = name;
  e.value_from = source;
  return e;
}

// workers.env, as the user wrote it.
void add_user_env(const Workers& w, std::vector<k8s::EnvVar>& env) {
  for (const auto& e : w.env) env.push_back(env_var(e.name, e.value));
}

// Where this pod stands in the job (common/launch_contract.h): `kubetune-trainer launch` reads it.
LaunchContract launch_contract(const FineTuneJob& job, int rank) {
  LaunchContract c;
  c.nnodes = job.spec.workers.replicas;
  c.node_rank = rank;
  c.nproc_per_node = processes_per_pod(job);
  c.master_addr = master_address(job);
  return c;
}

std::vector<k8s::EnvVar> container_env(const FineTuneJob& job, int rank, int attempt) {
  std::vector<k8s::EnvVar> env;
  for (const auto& [name, value] : launch_contract(job, rank).to_environment()) {
    env.push_back(env_var(name, value));
  }
  env.push_back(env_var("KUBETUNE_ATTEMPT", std::to_string(attempt)));
  env.push_back(field_env("POD_NAME", "metadata.name"));
  env.push_back(field_env("POD_NAMESPACE", "metadata.namespace"));
  add_user_env(job.spec.workers, env);
  return env;
}

// Everything about the node comes from the environment above.
std::vector<std::string> container_command() {
  return {"kubetune-trainer",
          "launch",
          "--",
          "train",
          "--config",
          std::string(kConfigMountDir) + "/" + kConfigFile};
}

k8s::ContainerPort container_port(const std::string& name, int port) {
  k8s::ContainerPort p;
  p.name = name;
  p.container_port = port;
  return p;
}

k8s::ResourceRequirements resources(const Workers& w) {
  k8s::ResourceRequirements r;
  if (w.gpus_per_worker > 0) r.limits[kResourceGpu] = w.gpus_per_worker;
  if (!w.resources.cpu.is_null()) {
    r.limits[kResourceCpu] = r.requests[kResourceCpu] = w.resources.cpu;
  }
  if (!w.resources.memory.is_null()) {
    r.limits[kResourceMemory] = r.requests[kResourceMemory] = w.resources.memory;
  }
  return r;
}

k8s::Volume config_volume(const FineTuneJob& job) {
  k8s::ConfigMapVolumeSource source;
  source.name = config_map_name(job.name);
  k8s::Volume v;
  v.name = kConfigVolume;
  v.config_map = source;
  return v;
}

// /dev/shm in memory, for the data loader and NCCL: the container runtime's default is 64 MiB.
k8s::Volume shm_volume(const FineTuneJob& job) {
  k8s::EmptyDirVolumeSource source;
  source.medium = "Memory";
  source.size_limit = job.spec.workers.shm_size;
  k8s::Volume v;
  v.name = kShmVolume;
  v.empty_dir = source;
  return v;
}

// spec.volumes: a PersistentVolumeClaim, else a hostPath.
k8s::Volume user_volume(const Volume& v) {
  k8s::Volume volume;
  volume.name = v.name;
  if (!v.persistent_volume_claim.claim_name.empty()) {
    k8s::PersistentVolumeClaimVolumeSource claim;
    claim.claim_name = v.persistent_volume_claim.claim_name;
    claim.read_only = v.read_only;
    volume.persistent_volume_claim = claim;
  } else {
    k8s::HostPathVolumeSource host_path;
    host_path.path = v.host_path.path;
    host_path.type = v.host_path.type;
    volume.host_path = host_path;
  }
  return volume;
}

void add_volumes(const FineTuneJob& job, k8s::PodSpec& pod_spec,
                 std::vector<k8s::VolumeMount>& mounts) {
  pod_spec.volumes = {config_volume(job), shm_volume(job)};
  mounts = {volume_mount(kConfigVolume, kConfigMountDir, true),
            volume_mount(kShmVolume, "/dev/shm", std::nullopt)};
  for (const auto& v : job.spec.volumes) {
    pod_spec.volumes.push_back(user_volume(v));
    mounts.push_back(volume_mount(v.name, v.mount_path, v.read_only));
  }
}

// Pod-level: the user and group, volume ownership, seccomp. Container-level: no escalation, no
// capabilities beyond the ones asked for.
k8s::PodSecurityContext pod_security_context(const api::SecurityContext& w) {
  k8s::SeccompProfile seccomp;
  seccomp.type = "RuntimeDefault";
  k8s::PodSecurityContext s;
  s.run_as_non_root = w.run_as_non_root;
  s.seccomp_profile = seccomp;
  s.fs_group = w.fs_group;
  s.fs_group_change_policy = "OnRootMismatch";  // no recursive chown of a large model volume
  if (w.run_as_user) s.run_as_user = *w.run_as_user;
  if (w.run_as_group) s.run_as_group = *w.run_as_group;
  return s;
}

k8s::SecurityContext container_security_context(const api::SecurityContext& w) {
  k8s::Capabilities capabilities;
  capabilities.drop = {"ALL"};
  capabilities.add = w.add_capabilities;
  k8s::SecurityContext s;
  s.allow_privilege_escalation = false;
  s.capabilities = capabilities;
  return s;
}

k8s::Toleration toleration(const api::Toleration& t) {
  k8s::Toleration out;
  out.key = t.key;
  if (t.operator_) out.operator_ = to_string(*t.operator_);
  out.value = t.value;
  out.effect = t.effect;
  out.toleration_seconds = t.toleration_seconds;
  return out;
}

// A pod of the job: placement, security, volumes, the fetch init container when the job has
// hf:// or s3:// sources (pinned to `pins`), and the trainer container with `command`.
k8s::Pod job_pod(const FineTuneJob& job, const std::string& name, const std::string& role,
                 k8s::Container container, const std::vector<api::FetchedSource>& pins) {
  const Workers& w = job.spec.workers;
  container.name = kTrainerContainer;
  container.image = w.image;
  container.image_pull_policy = to_string(w.image_pull_policy);
  container.security_context = container_security_context(w.security_context);
  k8s::Pod pod;
  pod.api_version = "v1";
  pod.kind = "Pod";
  k8s::PodSpec& spec = pod.spec;
  spec.restart_policy = "Never";  // the operator restarts the whole gang instead
  spec.security_context = pod_security_context(w.security_context);
  add_volumes(job, spec, container.volume_mounts);
  Workers cpu_only = w;
  cpu_only.gpus_per_worker = 0;
  add_staging_dirs(job.spec, spec, container);
  // A worker's fetch also restores the newest checkpoint of an s3:// checkpoint.dir.
  add_fetch_container(job.spec, pins, spec, container, resources(cpu_only), role == kRoleWorker);
  spec.containers = {container};
  spec.node_selector = w.node_selector;
  for (const auto& t : w.tolerations) spec.tolerations.push_back(toleration(t));
  spec.priority_class_name = w.priority_class_name;
  spec.service_account_name = w.service_account_name;
  pod.metadata = metadata(job, name);
  pod.metadata.labels[kLabelRole] = role;
  pod.metadata.annotations = w.annotations;
  pod.metadata.annotations[kAnnotationSpecHash] = spec_hash(job.spec_json);
  return pod;
}

k8s::Pod make_pod(const FineTuneJob& job, int rank, int attempt) {
  k8s::Container container;
  container.command = container_command();
  container.env = container_env(job, rank, attempt);
  container.resources = resources(job.spec.workers);
  container.ports = {container_port("rendezvous", kRendezvousPort)};
  if (job.spec.metrics.port > 0) {
    container.ports.push_back(container_port("metrics", job.spec.metrics.port));
  }
  k8s::Pod pod =
      job_pod(job, pod_name(job.name, rank), kRoleWorker, container, job.fetched_sources);
  pod.spec.hostname = pod_name(job.name, rank);
  if (has_service(job)) pod.spec.subdomain = service_name(job.name);
  // Time to finish the step and write a checkpoint after SIGTERM (a drain).
  pod.spec.termination_grace_period_seconds = job.spec.run_policy.termination_grace_period_seconds;
  pod.metadata.labels[kLabelRank] = std::to_string(rank);
  pod.metadata.labels[kLabelAttempt] = std::to_string(attempt);
  // Rank 0 writes the outputs; its publish container takes them on from there.
  if (rank == 0) add_publish_container(job.spec, pod.spec, pod.spec.containers.front());
  return pod;
}

k8s::Service service(const FineTuneJob& job) {
  k8s::ServicePort port;
  port.name = "rendezvous";
  port.port = kRendezvousPort;
  port.target_port = kRendezvousPort;
  k8s::Service svc;
  svc.api_version = "v1";
  svc.kind = "Service";
  svc.metadata = metadata(job, service_name(job.name));
  svc.spec.cluster_ip = "None";
  // Rendezvous happens before any pod is Ready.
  svc.spec.publish_not_ready_addresses = true;
  svc.spec.selector = {{kLabelJob, job.name}};
  svc.spec.ports = {port};
  return svc;
}

}  // namespace

std::string pod_name(const std::string& job, int rank) {
  return job + "-worker-" + std::to_string(rank);
}
std::string preflight_pod_name(const std::string& job) { return job + "-preflight"; }
std::string config_map_name(const std::string& job) { return job + "-config"; }
std::string service_name(const std::string& job) { return job; }

std::string master_address(const FineTuneJob& job) {
  if (!has_service(job)) return "127.0.0.1";
  return pod_name(job.name, 0) + "." + service_name(job.name) + "." + job.ns + ".svc";
}

k8s::OwnerReference owner_reference(const FineTuneJob& job) {
  k8s::OwnerReference ref;
  ref.api_version = kApiVersion;
  ref.kind = kKind;
  ref.name = job.name;
  ref.uid = job.uid;
  ref.controller = true;
  ref.block_owner_deletion = true;
  return ref;
}

bool owned_by(const k8s::ObjectMeta& meta, const std::string& uid) {
  if (uid.empty()) return false;
  for (const auto& ref : meta.owner_references) {
    if (ref.uid == uid && ref.controller.value_or(false)) return true;
  }
  return false;
}

std::string spec_hash(const json& spec) {
  json s = spec;
  s.erase("runPolicy");                  // json: our spec as written, the hash's input
  uint64_t h = 14695981039346656037ull;  // FNV-1a: stable across builds, unlike std::hash
  for (unsigned char c : s.dump()) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::vector<std::string> preflight_command(const FineTuneJob& job, const std::string& config_path,
                                           std::optional<double> gpu_memory_gib) {
  const int world = job.spec.workers.replicas * processes_per_pod(job);
  std::vector<std::string> argv = {"kubetune-trainer", "preflight",    "--config",
                                   config_path,        "--world-size", std::to_string(world)};
  if (gpu_memory_gib) {
    char gib[32];
    std::snprintf(gib, sizeof gib, "%g", *gpu_memory_gib);
    argv.insert(argv.end(), {"--gpu-memory-gib", gib});
  }
  return argv;
}

k8s::Pod preflight_pod(const FineTuneJob& job, std::optional<double> gpu_memory_gib, int attempt) {
  k8s::Container container;
  container.command =
      preflight_command(job, std::string(kConfigMountDir) + "/" + kConfigFile, gpu_memory_gib);
  container.command.push_back("--termination-log");
  container.command.push_back("/dev/termination-log");
  // The workers' CPU and memory (it reads the same data), no GPU; NVIDIA_VISIBLE_DEVICES=void
  // keeps an image that sets it to "all" from seeing the node's GPUs anyway.
  Workers cpu_only = job.spec.workers;
  cpu_only.gpus_per_worker = 0;
  container.env = {env_var("NVIDIA_VISIBLE_DEVICES", "void")};
  add_user_env(job.spec.workers, container.env);
  container.resources = resources(cpu_only);
  // A trainer that dies before writing its report still leaves its last log lines.
  container.termination_message_policy = "FallbackToLogsOnError";
  // Unpinned: the preflight's fetch resolves the revisions the workers then use.
  k8s::Pod pod = job_pod(job, preflight_pod_name(job.name), kRolePreflight, container, {});
  pod.metadata.labels[kLabelAttempt] = std::to_string(attempt);
  return pod;
}

k8s::ConfigMap config_map(const FineTuneJob& job) {
  k8s::ConfigMap cm;
  cm.api_version = "v1";
  cm.kind = "ConfigMap";
  cm.metadata = metadata(job, config_map_name(job.name));
  // hf:// and s3:// sources are read where the fetch container links them; an s3:// output.dir
  // is written to the staging folder the publish container uploads.
  cm.data[kConfigFile] =
      with_local_dirs(with_linked_sources(job.train_config, kSourcesDir), kPodStagingDirs).dump(2);
  return cm;
}

DesiredObjects desired_objects(const FineTuneJob& job, int attempt) {
  DesiredObjects out;
  out.config_map = config_map(job);
  if (has_service(job)) out.service = service(job);
  for (int rank = 0; rank < job.spec.workers.replicas; ++rank) {
    out.pods.push_back(make_pod(job, rank, attempt));
  }
  return out;
}

}  // namespace kubetune::op
