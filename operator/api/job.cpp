#include "operator/api/job.h"

#include <regex>

#include "common/contracts.h"
#include "common/schema_validator.h"
#include "common/train_config.h"
#include "operator/api/cel_rules.h"
#include "operator/api/crd.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// A namespace name, as Kubernetes checks it (IsDNS1123Label).
bool is_dns1123_label(const json& value) {
  static const std::regex label("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  if (!value.is_string()) return false;
  const std::string& s = value.get_ref<const std::string&>();
  return !s.empty() && s.size() <= 63 && std::regex_match(s, label);
}

// The trainer's part of the spec: everything but the operator's keys.
json training_part(const json& spec) {
  json out = spec;
  for (const auto& key : operator_spec_fields()) out.erase(key);
  return out;
}

Workers parse_workers(const json& w) {
  Workers out;
  out.replicas = w.value("replicas", 1);
  out.gpus = w.value("gpusPerWorker", 1);
  if (w.contains("gpuMemoryGiB")) out.gpu_memory_gib = w["gpuMemoryGiB"].get<double>();
  out.image = w.value("image", "");
  out.pull_policy = w.value("imagePullPolicy", "IfNotPresent");
  if (w.contains("resources")) {
    out.cpu = w["resources"].value("cpu", json());
    out.memory = w["resources"].value("memory", json());
  }
  out.shm_size = w.value("shmSize", json("8Gi"));
  out.node_selector = w.value("nodeSelector", json::object());
  out.tolerations = w.value("tolerations", json::array());
  out.env = w.value("env", json::array());
  out.priority_class = w.value("priorityClassName", "");
  out.service_account = w.value("serviceAccountName", "");
  const json security = w.value("securityContext", json::object());
  out.run_as_non_root = security.value("runAsNonRoot", out.run_as_non_root);
  if (security.contains("runAsUser")) out.run_as_user = security["runAsUser"].get<int64_t>();
  if (security.contains("runAsGroup")) out.run_as_group = security["runAsGroup"].get<int64_t>();
  out.fs_group = security.value("fsGroup", *out.fs_group);
  out.add_capabilities = security.value("addCapabilities", std::vector<std::string>{});
  return out;
}

RunPolicy parse_run_policy(const json& r) {
  RunPolicy out;
  out.backoff_limit = r.value("backoffLimit", 3);
  if (r.contains("activeDeadlineSeconds")) out.active_deadline_seconds = r["activeDeadlineSeconds"];
  if (r.contains("ttlSecondsAfterFinished")) {
    out.ttl_seconds_after_finished = r["ttlSecondsAfterFinished"];
  }
  out.suspend = r.value("suspend", false);
  out.preflight = r.value("preflight", out.preflight);
  out.stall_timeout_seconds = r.value("stallTimeoutSeconds", out.stall_timeout_seconds);
  out.termination_grace_period_seconds =
      r.value("terminationGracePeriodSeconds", out.termination_grace_period_seconds);
  return out;
}

std::vector<Volume> parse_volumes(const json& vs) {
  std::vector<Volume> out;
  for (const auto& v : vs) {
    Volume vol;
    vol.name = v.value("name", "");
    vol.mount_path = v.value("mountPath", "");
    vol.read_only = v.value("readOnly", false);
    if (v.contains("persistentVolumeClaim"))
      vol.claim_name = v["persistentVolumeClaim"]["claimName"];
    if (v.contains("hostPath")) {
      vol.host_path = v["hostPath"]["path"];
      vol.host_path_type = v["hostPath"].value("type", "");
    }
    out.push_back(vol);
  }
  return out;
}

}  // namespace

SpecError::SpecError(std::vector<std::string> problems)
    : std::runtime_error("invalid FineTuneJob:\n" + join_lines(problems)),
      problems_(std::move(problems)) {}

std::vector<std::string> validate_job(json& object) {
  std::vector<std::string> problems;
  if (!object.is_object()) return {"<root>: a FineTuneJob must be a mapping"};
  // Required, as the API server requires them: without them kubectl cannot route the manifest.
  if (object.value("apiVersion", json()) != kApiVersion) {
    problems.push_back("apiVersion: must be " + std::string(kApiVersion));
  }
  if (object.value("kind", json()) != kKind) {
    problems.push_back("kind: must be " + std::string(kKind));
  }
  const json meta = object.value("metadata", json::object());
  if (!meta.is_object()) return {"metadata: must be a mapping"};
  if (meta.value("name", "").empty() && meta.value("generateName", "").empty()) {
    problems.push_back("metadata.name: required field is missing");
  }
  if (meta.contains("namespace") && !is_dns1123_label(meta["namespace"])) {
    problems.push_back(
        "metadata.namespace: must be a DNS-1123 label (lower-case letters, digits "
        "and '-', at most 63 characters), got " +
        meta["namespace"].dump());
  }
  json status = object.contains("status") ? object["status"] : json();
  object.erase("status");  // written by the operator, never a user's problem
  validate_against_schema(job_schema(), object, "", cel_evaluators(), problems);
  if (!status.is_null()) object["status"] = status;
  if (!problems.empty() || !object.contains("spec")) return problems;
  // The trainer's own validator has the last word on its part (cross-field checks the schema
  // cannot express); its paths are relative to the config, ours to the object.
  try {
    validate_train_config(training_part(object["spec"]));
  } catch (const ConfigError& e) {
    for (const auto& p : e.problems()) problems.push_back("spec." + p);
  }
  return problems;
}

FineTuneJob parse_job(const json& object) {
  json obj = object;
  auto problems = validate_job(obj);
  if (!problems.empty()) throw SpecError(problems);
  FineTuneJob job;
  const json& meta = obj["metadata"];
  job.name = meta.value("name", "");
  job.ns = meta.value("namespace", "default");
  job.uid = meta.value("uid", "");
  job.generation = meta.value("generation", 0L);
  job.spec = obj["spec"];
  job.train_config = validate_train_config(training_part(job.spec));
  if (job.train_config["metrics"].value("jobName", "").empty()) {
    job.train_config["metrics"]["jobName"] = job.name;  // the `job` label of every series
  }
  job.config = TrainConfig::from_json(job.train_config);
  job.workers = parse_workers(job.spec["workers"]);
  job.run_policy = parse_run_policy(job.spec["runPolicy"]);
  job.volumes = parse_volumes(job.spec.value("volumes", json::array()));
  return job;
}

}  // namespace kubetune::op
