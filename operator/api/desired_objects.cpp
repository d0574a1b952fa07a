#include "operator/api/desired_objects.h"

#include <cstdint>
#include <cstdio>

#include "common/contracts.h"
#include "common/launch_contract.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

json labels(const FineTuneJob& job) {
  return {{kLabelManagedBy, kManagerName},
          {"app.kubernetes.io/name", "kubetune"},
          {"app.kubernetes.io/instance", job.name},
          {kLabelJob, job.name}};
}

json metadata(const FineTuneJob& job, const std::string& name) {
  return {{"name", name},
          {"namespace", job.ns},
          {"labels", labels(job)},
          {"ownerReferences", json::array({owner_reference(job)})}};
}

int processes_per_pod(const FineTuneJob& job) {
  return job.spec.workers.gpus_per_worker > 0 ? job.spec.workers.gpus_per_worker : 1;
}

json env_var(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}

json field_env(const std::string& name, const std::string& field) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", field}}}}}};
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

json container_env(const FineTuneJob& job, int rank, int attempt) {
  json env = json::array();
  for (const auto& [name, value] : launch_contract(job, rank).to_environment()) {
    env.push_back(env_var(name, value));
  }
  env.push_back(env_var("KUBETUNE_ATTEMPT", std::to_string(attempt)));
  env.push_back(field_env("POD_NAME", "metadata.name"));
  env.push_back(field_env("POD_NAMESPACE", "metadata.namespace"));
  for (const auto& e : job.spec.workers.env) env.push_back(e);
  return env;
}

// Everything about the node comes from the environment above.
json container_command() {
  return {"kubetune-trainer",
          "launch",
          "--",
          "train",
          "--config",
          std::string(kConfigMountDir) + "/" + kConfigFile};
}

json resources(const Workers& w) {
  json limits = json::object();
  json requests = json::object();
  if (w.gpus_per_worker > 0) limits["nvidia.com/gpu"] = w.gpus_per_worker;
  if (!w.resources.cpu.is_null()) limits["cpu"] = requests["cpu"] = w.resources.cpu;
  if (!w.resources.memory.is_null()) {
    limits["memory"] = requests["memory"] = w.resources.memory;
  }
  json out = {{"limits", limits}};
  if (!requests.empty()) out["requests"] = requests;
  return out;
}

void add_volumes(const FineTuneJob& job, json& pod_spec, json& mounts) {
  pod_spec["volumes"] = json::array(
      {{{"name", "kubetune-config"}, {"configMap", {{"name", config_map_name(job.name)}}}},
       {{"name", "kubetune-shm"},
        {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", job.spec.workers.shm_size}}}}});
  mounts = json::array(
      {{{"name", "kubetune-config"}, {"mountPath", kConfigMountDir}, {"readOnly", true}},
       {{"name", "kubetune-shm"}, {"mountPath", "/dev/shm"}}});
  for (const auto& v : job.spec.volumes) {
    json volume = {{"name", v.name}};
    if (!v.persistent_volume_claim.claim_name.empty()) {
      volume["persistentVolumeClaim"] = {{"claimName", v.persistent_volume_claim.claim_name},
                                         {"readOnly", v.read_only}};
    } else {
      volume["hostPath"] = {{"path", v.host_path.path}, {"type", v.host_path.type}};
    }
    pod_spec["volumes"].push_back(volume);
    mounts.push_back({{"name", v.name}, {"mountPath", v.mount_path}, {"readOnly", v.read_only}});
  }
}

// Pod-level: the user and group, volume ownership, seccomp. Container-level: no escalation, no
// capabilities beyond the ones asked for.
json pod_security_context(const api::SecurityContext& w) {
  json s = {{"runAsNonRoot", w.run_as_non_root},
            {"seccompProfile", {{"type", "RuntimeDefault"}}},
            {"fsGroup", w.fs_group},
            // no recursive chown of a large model volume
            {"fsGroupChangePolicy", "OnRootMismatch"}};
  if (w.run_as_user) s["runAsUser"] = *w.run_as_user;
  if (w.run_as_group) s["runAsGroup"] = *w.run_as_group;
  return s;
}

json container_security_context(const api::SecurityContext& w) {
  json capabilities = {{"drop", json::array({"ALL"})}};
  if (!w.add_capabilities.empty()) capabilities["add"] = w.add_capabilities;
  return {{"allowPrivilegeEscalation", false}, {"capabilities", capabilities}};
}

// A pod of the job: placement, security, volumes and the trainer container with `command`.
json job_pod(const FineTuneJob& job, const std::string& name, const std::string& role,
             json container) {
  container["name"] = kTrainerContainer;
  container["image"] = job.spec.workers.image;
  container["imagePullPolicy"] = job.spec.workers.image_pull_policy;
  container["securityContext"] = container_security_context(job.spec.workers.security_context);
  json spec = {{"restartPolicy", "Never"},  // the operator restarts the whole gang instead
               {"securityContext", pod_security_context(job.spec.workers.security_context)}};
  json mounts;
  add_volumes(job, spec, mounts);
  container["volumeMounts"] = mounts;
  spec["containers"] = json::array({container});
  const Workers& w = job.spec.workers;
  if (!w.node_selector.empty()) spec["nodeSelector"] = w.node_selector;
  if (!w.tolerations.empty()) spec["tolerations"] = w.tolerations;
  if (w.priority_class_name) spec["priorityClassName"] = *w.priority_class_name;
  if (w.service_account_name) spec["serviceAccountName"] = *w.service_account_name;
  json meta = metadata(job, name);
  meta["labels"][kLabelRole] = role;
  meta["annotations"] = job.spec.workers.annotations;
  meta["annotations"][kAnnotationSpecHash] = spec_hash(job.spec_json);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
}

json make_pod(const FineTuneJob& job, int rank, int attempt) {
  json container = {{"command", container_command()},
                    {"env", container_env(job, rank, attempt)},
                    {"resources", resources(job.spec.workers)}};
  container["ports"] = json::array({{{"name", "rendezvous"}, {"containerPort", kRendezvousPort}}});
  if (job.spec.metrics.port > 0) {
    container["ports"].push_back({{"name", "metrics"}, {"containerPort", job.spec.metrics.port}});
  }
  json pod = job_pod(job, pod_name(job.name, rank), kRoleWorker, container);
  pod["spec"]["hostname"] = pod_name(job.name, rank);
  pod["spec"]["subdomain"] = service_name(job.name);
  // Time to finish the step and write a checkpoint after SIGTERM (a drain).
  pod["spec"]["terminationGracePeriodSeconds"] =
      job.spec.run_policy.termination_grace_period_seconds;
  pod["metadata"]["labels"][kLabelRank] = std::to_string(rank);
  pod["metadata"]["labels"][kLabelAttempt] = std::to_string(attempt);
  return pod;
}

}  // namespace

std::string pod_name(const std::string& job, int rank) {
  return job + "-worker-" + std::to_string(rank);
}
std::string preflight_pod_name(const std::string& job) { return job + "-preflight"; }
std::string config_map_name(const std::string& job) { return job + "-config"; }
std::string service_name(const std::string& job) { return job; }

std::string master_address(const FineTuneJob& job) {
  return pod_name(job.name, 0) + "." + service_name(job.name) + "." + job.ns + ".svc";
}

json owner_reference(const FineTuneJob& job) {
  return {{"apiVersion", kApiVersion}, {"kind", kKind},
          {"name", job.name},          {"uid", job.uid},
          {"controller", true},        {"blockOwnerDeletion", true}};
}

bool owned_by(const json& object, const std::string& uid) {
  if (uid.empty()) return false;
  for (const auto& ref : object["metadata"].value("ownerReferences", json::array())) {
    if (ref.value("uid", "") == uid && ref.value("controller", false)) return true;
  }
  return false;
}

std::string spec_hash(const json& spec) {
  json s = spec;
  s.erase("runPolicy");
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

json preflight_pod(const FineTuneJob& job, std::optional<double> gpu_memory_gib, int attempt) {
  json command =
      preflight_command(job, std::string(kConfigMountDir) + "/" + kConfigFile, gpu_memory_gib);
  command.push_back("--termination-log");
  command.push_back("/dev/termination-log");
  // The workers' CPU and memory (it reads the same data), no GPU; NVIDIA_VISIBLE_DEVICES=void
  // keeps an image that sets it to "all" from seeing the node's GPUs anyway.
  Workers cpu_only = job.spec.workers;
  cpu_only.gpus_per_worker = 0;
  json env = json::array({env_var("NVIDIA_VISIBLE_DEVICES", "void")});
  for (const auto& e : job.spec.workers.env) env.push_back(e);
  json container = {{"command", command},
                    {"env", env},
                    {"resources", resources(cpu_only)},
                    // A trainer that dies before writing its report still leaves its last log
                    // lines.
                    {"terminationMessagePolicy", "FallbackToLogsOnError"}};
  json pod = job_pod(job, preflight_pod_name(job.name), kRolePreflight, container);
  pod["metadata"]["labels"][kLabelAttempt] = std::to_string(attempt);
  return pod;
}

json config_map(const FineTuneJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", metadata(job, config_map_name(job.name))},
          {"data", {{kConfigFile, job.train_config.dump(2)}}}};
}

DesiredObjects desired_objects(const FineTuneJob& job, int attempt) {
  DesiredObjects out;
  out.config_map = config_map(job);
  out.service = {{"apiVersion", "v1"},
                 {"kind", "Service"},
                 {"metadata", metadata(job, service_name(job.name))},
                 {"spec",
                  {{"clusterIP", "None"},
                   // Rendezvous happens before any pod is Ready.
                   {"publishNotReadyAddresses", true},
                   {"selector", {{kLabelJob, job.name}}},
                   {"ports", json::array({{{"name", "rendezvous"},
                                           {"port", kRendezvousPort},
                                           {"targetPort", kRendezvousPort}}})}}}};
  for (int rank = 0; rank < job.spec.workers.replicas; ++rank) {
    out.pods.push_back(make_pod(job, rank, attempt));
  }
  return out;
}

}  // namespace kubetune::op
