#include "operator/api/workload.h"

#include <algorithm>

#include "common/contracts.h"
#include "operator/api/desired_objects.h"

namespace kubetune::op::kueue {

using nlohmann::json;

namespace {

std::optional<std::string> label(const json& object, const char* key) {
  const json labels = object.value("metadata", json::object()).value("labels", json::object());
  const std::string value = labels.value(key, "");
  if (value.empty()) return std::nullopt;
  return value;
}

bool is_true(const json& workload, const std::string& type) {
  const json* c = workload_condition(workload, type);
  return c && c->value("status", "") == "True";
}

// Kueue counts a pod's requests; where only a limit is given (our GPUs) the request is the limit,
// as the API server defaults it for a pod.
void requests_from_limits(json& container) {
  json& resources = container["resources"];
  if (!resources.contains("limits")) return;
  for (const auto& [name, quantity] : resources["limits"].items()) {
    if (!resources.contains("requests") || !resources["requests"].contains(name)) {
      resources["requests"][name] = quantity;
    }
  }
}

}  // namespace

const json* workload_condition(const json& workload, const std::string& type) {
  const auto status = workload.find("status");
  if (status == workload.end() || !status->contains("conditions")) return nullptr;
  for (const auto& c : (*status)["conditions"]) {
    if (c.value("type", "") == type) return &c;
  }
  return nullptr;
}

std::optional<std::string> queue_name(const json& job_object) {
  return label(job_object, kLabelQueueName);
}

std::optional<std::string> priority_class(const json& job_object) {
  return label(job_object, kLabelPriorityClass);
}

std::string workload_name(const FineTuneJob& job) {
  // 253 characters at most; the job's name is at most 253 too, so the prefix may be cut.
  std::string prefix = "finetunejob-" + job.name;
  prefix.resize(std::min<size_t>(prefix.size(), 240));
  while (!prefix.empty() && prefix.back() == '-') prefix.pop_back();
  return prefix + "-" + spec_hash(job.spec_json).substr(0, 5);
}

json workload(const FineTuneJob& job, const std::string& queue,
              const std::optional<Priority>& priority) {
  // The podSet's template is rank 0's pod: every worker asks for the same resources.
  json pod = desired_objects(job, 0).pods.at(0);
  json template_metadata = {{"labels", pod["metadata"]["labels"]}};
  for (auto& container : pod["spec"]["containers"]) requests_from_limits(container);
  json meta = {{"name", workload_name(job)},
               {"namespace", job.ns},
               {"labels",
                {{kLabelManagedBy, kManagerName},
                 {kLabelJob, job.name},
                 {kLabelQueueName, queue},
                 // How Kueue recognises a Workload whose owner is gone.
                 {kLabelJobUid, job.uid}}},
               {"annotations", {{kAnnotationSpecHash, spec_hash(job.spec_json)}}},
               {"ownerReferences", json::array({owner_reference(job)})}};
  json spec = {
      {"queueName", queue},
      {"active", true},
      {"podSets",
       json::array({{{"name", kPodSetName},
                     {"count", job.spec.workers.replicas},
                     {"template", {{"metadata", template_metadata}, {"spec", pod["spec"]}}}}})}};
  if (priority) {
    spec["priorityClassRef"] = {
        {"group", kGroup}, {"kind", "WorkloadPriorityClass"}, {"name", priority->class_name}};
    spec["priority"] = priority->value;
  }
  return {{"apiVersion", kApiVersion}, {"kind", "Workload"}, {"metadata", meta}, {"spec", spec}};
}

Admission read_admission(const json& workload) {
  Admission a;
  const json status = workload.value("status", json::object());
  const json admission = status.value("admission", json());
  a.reserved = admission.is_object();
  a.admitted = a.reserved && is_true(workload, "Admitted");
  if (admission.is_object()) {
    a.cluster_queue = admission.value("clusterQueue", "");
    const json assignments = admission.value("podSetAssignments", json::array());
    for (const auto& ps : assignments) {
      const json flavors = ps.value("flavors", json::object());
      for (auto it = flavors.begin(); it != flavors.end(); ++it) {
        a.flavors[it.key()] = it->get<std::string>();
      }
    }
  }
  if (const json* c = workload_condition(workload, "Evicted");
      c && c->value("status", "") == "True") {
    a.evicted_reason = c->value("reason", "");
    a.evicted_message = c->value("message", "");
  }
  if (const json* c = workload_condition(workload, "Finished");
      c && c->value("status", "") == "True") {
    a.finished = c->value("reason", "");
  }
  if (const json* c = workload_condition(workload, "QuotaReserved");
      c && c->value("status", "") != "True") {
    a.pending_message = c->value("message", "");
  }
  return a;
}

void apply_flavor(json& pod, const json& resource_flavor) {
  const json spec = resource_flavor.value("spec", json::object());
  json& pod_spec = pod["spec"];
  const json node_labels = spec.value("nodeLabels", json::object());
  for (auto it = node_labels.begin(); it != node_labels.end(); ++it) {
    pod_spec["nodeSelector"][it.key()] = *it;
  }
  for (const auto& toleration : spec.value("tolerations", json::array())) {
    if (!pod_spec.contains("tolerations")) pod_spec["tolerations"] = json::array();
    json& tolerations = pod_spec["tolerations"];
    if (std::find(tolerations.begin(), tolerations.end(), toleration) == tolerations.end()) {
      tolerations.push_back(toleration);
    }
  }
}

void set_workload_condition(json& workload, const std::string& type, bool value,
                            const std::string& reason, const std::string& message,
                            const std::string& now) {
  json& conditions = workload["status"]["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  const std::string status = value ? "True" : "False";
  json* c = nullptr;
  for (auto& existing : conditions) {
    if (existing.value("type", "") == type) c = &existing;
  }
  if (!c) {
    conditions.push_back({{"type", type}, {"status", "Unknown"}});
    c = &conditions.back();
  }
  if ((*c)["status"] != status) (*c)["lastTransitionTime"] = now;
  (*c)["status"] = status;
  (*c)["reason"] = reason;
  (*c)["message"] = message.substr(0, 32768);
  (*c)["observedGeneration"] = workload["metadata"].value("generation", 0L);
}

void unset_quota_reservation(json& workload, const std::string& evicted_reason,
                             const std::string& message, const std::string& now) {
  const bool requeue = evicted_reason == "Preempted" || evicted_reason == "NodeFailures";
  set_workload_condition(workload, "Requeued", requeue, evicted_reason, message, now);
  workload["status"].erase("admission");
  set_workload_condition(workload, "QuotaReserved", false, "PendingEvaluation", message, now);
  set_workload_condition(workload, "Admitted", false, "NoReservation",
                         "The workload has no reservation", now);
}

}  // namespace kubetune::op::kueue
