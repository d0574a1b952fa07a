// Kueue's side of a FineTuneJob (kueue.x-k8s.io/v1beta2, as Kueue's own job integrations do it
// through its jobframework): a job labelled kueue.x-k8s.io/queue-name gets a Workload whose one
// podSet is the gang (count = replicas, the worker pod's template with its requests). The operator
// creates no worker pod until Kueue admits the Workload, then adds the admitted ResourceFlavors'
// node labels and tolerations to the pods. The Workload carries no finalizer: deleting the job
// deletes it (garbage collector) and Kueue frees its quota at once. The Workload's type is
// generated from Kueue's CRD as the API server serves it (operator/kube/openapi/, with the Kueue
// version), and tests/operator/kueue_workload_test.py checks what we make against that schema.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/job.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op::kueue {

inline constexpr const char* kGroup = "kueue.x-k8s.io";
inline constexpr const char* kApiVersion = "kueue.x-k8s.io/v1beta2";
// The labels a user puts on the FineTuneJob, as on any job Kueue manages.
inline constexpr const char* kLabelQueueName = "kueue.x-k8s.io/queue-name";
inline constexpr const char* kLabelPriorityClass = "kueue.x-k8s.io/priority-class";
inline constexpr const char* kLabelJobUid = "kueue.x-k8s.io/job-uid";
// The one podSet of a FineTuneJob's Workload.
inline constexpr const char* kPodSetName = "workers";
// On the Workload, written with its spec.active in one update: the runPolicy.suspend the operator
// last applied to spec.active. spec.active is written only when runPolicy.suspend differs from
// it (the user toggled it), so a Workload someone else deactivated (an administrator, `kueuectl
// stop workload`) stays deactivated.
inline constexpr const char* kAnnotationAppliedSuspend = "kubetune.io/applied-suspend";

// The runPolicy.suspend last applied to `wl`'s spec.active (false for a Workload without the
// annotation: one is made active).
bool applied_suspend(const k8s::Workload& wl);

// The LocalQueue the job names, if any.
std::optional<std::string> queue_name(const k8s::ObjectMeta& job_metadata);
// The WorkloadPriorityClass the job names, if any.
std::optional<std::string> priority_class(const k8s::ObjectMeta& job_metadata);

// finetunejob-<job>-<5 hex of the spec hash>: a spec edited while suspended gets a new Workload.
std::string workload_name(const FineTuneJob& job);

struct Priority {
  std::string class_name;
  int value = 0;
};

// The Workload for the job's gang of `attempt`, owned by the job.
k8s::Workload workload(const FineTuneJob& job, const std::string& queue,
                       const std::optional<Priority>& priority);

// What an admission says, read from a Workload's status.
struct Admission {
  bool reserved = false;  // status.admission set: Kueue holds quota for it
  bool admitted = false;  // reserved and condition Admitted=True
  std::string cluster_queue;
  std::map<std::string, std::string> flavors;  // resource -> ResourceFlavor
  std::optional<std::string> evicted_reason;   // Evicted=True: its reason (Preempted, ...)
  std::string evicted_message;
  std::optional<std::string> finished;  // Finished=True
  std::string pending_message;          // QuotaReserved=False's message: why it waits
};
Admission read_admission(const k8s::Workload& workload);

// The Workload's status condition of that type, or null (a pointer into `workload`).
const k8s::Condition* workload_condition(const k8s::Workload& workload, const std::string& type);

// Adds a ResourceFlavor's spec.nodeLabels (node selector) and spec.tolerations to a pod.
void apply_flavor(k8s::Pod& pod, const k8s::ResourceFlavor& resource_flavor);

// The status conditions an owner writes (metav1.Condition, as apimachinery's SetStatusCondition:
// lastTransitionTime changes only when status flips).
void set_workload_condition(k8s::Workload& workload, const std::string& type, bool value,
                            const std::string& reason, const std::string& message,
                            const std::string& now);

// After an eviction, once the gang is gone: the quota reservation is given back as Kueue's
// jobframework does (UnsetQuotaReservationWithCondition): admission cleared, QuotaReserved=False
// and Admitted=False, and Requeued set as jobframework sets it (True after a preemption or node
// failures, so that it queues again at once; False otherwise, e.g. Deactivated until reactivated).
void unset_quota_reservation(k8s::Workload& workload, const std::string& evicted_reason,
                             const std::string& message, const std::string& now);

}  // namespace kubetune::op::kueue
