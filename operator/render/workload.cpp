#include "operator/render/workload.h"

#include <algorithm>

#include "common/contracts.h"
#include "operator/kube/objects.h"
#include "operator/render/desired_objects.h"

namespace kubetune::op::kueue {

namespace {

// The label's value; none when it is absent or empty.
std::optional<std::string> label(const k8s::ObjectMeta& meta, const char* key) {
  std::string value = kube::label(meta, key);
  if (value.empty()) return std::nullopt;
  return value;
}

bool is_true(const k8s::Workload& workload, const std::string& type) {
  const k8s::Condition* c = workload_condition(workload, type);
  return c && c->status == "True";
}

// Kueue counts a pod's requests; where only a limit is given (our GPUs) the request is the limit,
// as the API server defaults it for a pod.
void requests_from_limits(k8s::ResourceRequirements& resources) {
  // emplace: a request that is given stays as it is.
  for (const auto& [name, quantity] : resources.limits) resources.requests.emplace(name, quantity);
}

// A flavor's toleration is added once: compared member by member, the ones we do not name too.
bool has_toleration(const std::vector<k8s::Toleration>& tolerations, const k8s::Toleration& t) {
  const nlohmann::json wanted = t;
  return std::any_of(tolerations.begin(), tolerations.end(), [&](const k8s::Toleration& existing) {
    return nlohmann::json(existing) == wanted;
  });
}

k8s::ObjectMeta workload_metadata(const FineTuneJob& job, const std::string& queue) {
  k8s::ObjectMeta meta;
  meta.name = workload_name(job);
  meta.namespace_ = job.ns;
  meta.labels = {{kLabelManagedBy, kManagerName},
                 {kLabelJob, job.name},
                 {kLabelQueueName, queue},
                 // How Kueue recognises a Workload whose owner is gone.
                 {kLabelJobUid, job.uid}};
  meta.annotations = {{kAnnotationSpecHash, spec_hash(job.spec_json)},
                      {kAnnotationAppliedSuspend, "false"}};  // made active
  meta.owner_references = {owner_reference(job)};
  return meta;
}

// The gang: `replicas` pods like rank 0's.
k8s::PodSet pod_set(const FineTuneJob& job) {
  // The podSet's template is rank 0's pod: every worker asks for the same resources.
  k8s::Pod pod = desired_objects(job, 0).pods.at(0);
  for (auto& container : pod.spec.containers) requests_from_limits(container.resources);
  k8s::PodSet set;
  set.name = kPodSetName;
  set.count = job.spec.workers.replicas;
  set.template_.metadata.labels = pod.metadata.labels;
  set.template_.spec = pod.spec;
  return set;
}

}  // namespace

const k8s::Condition* workload_condition(const k8s::Workload& workload, const std::string& type) {
  for (const auto& c : workload.status.conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

std::optional<std::string> queue_name(const k8s::ObjectMeta& job_metadata) {
  return label(job_metadata, kLabelQueueName);
}

std::optional<std::string> priority_class(const k8s::ObjectMeta& job_metadata) {
  return label(job_metadata, kLabelPriorityClass);
}

bool applied_suspend(const k8s::Workload& wl) {
  const auto it = wl.metadata.annotations.find(kAnnotationAppliedSuspend);
  return it != wl.metadata.annotations.end() && it->second == "true";
}

std::string workload_name(const FineTuneJob& job) {
  // 253 characters at most; the job's name is at most 253 too, so the prefix may be cut.
  std::string prefix = "finetunejob-" + job.name;
  prefix.resize(std::min<size_t>(prefix.size(), 240));
  while (!prefix.empty() && prefix.back() == '-') prefix.pop_back();
  return prefix + "-" + spec_hash(job.spec_json).substr(0, 5);
}

k8s::Workload workload(const FineTuneJob& job, const std::string& queue,
                       const std::optional<Priority>& priority) {
  k8s::Workload wl;
  wl.api_version = kApiVersion;
  wl.kind = "Workload";
  wl.metadata = workload_metadata(job, queue);
  wl.spec.queue_name = queue;
  wl.spec.active = true;
  wl.spec.pod_sets = {pod_set(job)};
  if (priority) {
    k8s::PriorityClassRef ref;
    ref.group = kGroup;
    ref.kind = "WorkloadPriorityClass";
    ref.name = priority->class_name;
    wl.spec.priority_class_ref = ref;
    wl.spec.priority = priority->value;
  }
  return wl;
}

Admission read_admission(const k8s::Workload& workload) {
  Admission a;
  const std::optional<k8s::Admission>& admission = workload.status.admission;
  a.reserved = admission.has_value();
  a.admitted = a.reserved && is_true(workload, "Admitted");
  if (admission) {
    a.cluster_queue = admission->cluster_queue.value_or("");
    for (const auto& ps : admission->pod_set_assignments) {
      for (const auto& [resource, flavor] : ps.flavors) a.flavors[resource] = flavor;
    }
  }
  if (const k8s::Condition* c = workload_condition(workload, "Evicted"); c && c->status == "True") {
    a.evicted_reason = c->reason;
    a.evicted_message = c->message;
  }
  if (const k8s::Condition* c = workload_condition(workload, "Finished");
      c && c->status == "True") {
    a.finished = c->reason;
  }
  if (const k8s::Condition* c = workload_condition(workload, "QuotaReserved");
      c && c->status != "True") {
    a.pending_message = c->message;
  }
  return a;
}

void apply_flavor(k8s::Pod& pod, const k8s::ResourceFlavor& resource_flavor) {
  k8s::PodSpec& pod_spec = pod.spec;
  for (const auto& [key, value] : resource_flavor.spec.node_labels) {
    pod_spec.node_selector[key] = value;
  }
  for (const auto& toleration : resource_flavor.spec.tolerations) {
    if (!has_toleration(pod_spec.tolerations, toleration)) {
      pod_spec.tolerations.push_back(toleration);
    }
  }
}

void set_workload_condition(k8s::Workload& workload, const std::string& type, bool value,
                            const std::string& reason, const std::string& message,
                            const std::string& now) {
  std::vector<k8s::Condition>& conditions = workload.status.conditions;
  const std::string status = value ? "True" : "False";
  k8s::Condition* c = nullptr;
  for (auto& existing : conditions) {
    if (existing.type == type) c = &existing;
  }
  if (!c) {
    k8s::Condition added;
    added.type = type;
    added.status = "Unknown";
    conditions.push_back(added);
    c = &conditions.back();
  }
  if (c->status != status) c->last_transition_time = now;
  c->status = status;
  c->reason = reason;
  c->message = message.substr(0, 32768);
  c->observed_generation = workload.metadata.generation.value_or(0);
}

void unset_quota_reservation(k8s::Workload& workload, const std::string& evicted_reason,
                             const std::string& message, const std::string& now) {
  const bool requeue = evicted_reason == "Preempted" || evicted_reason == "NodeFailures";
  set_workload_condition(workload, "Requeued", requeue, evicted_reason, message, now);
  workload.status.admission.reset();
  set_workload_condition(workload, "QuotaReserved", false, "PendingEvaluation", message, now);
  set_workload_condition(workload, "Admitted", false, "NoReservation",
                         "The workload has no reservation", now);
}

}  // namespace kubetune::op::kueue
