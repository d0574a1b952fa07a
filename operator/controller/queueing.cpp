// Kueue, as the reconciler sees it (a FineTuneJob labelled kueue.x-k8s.io/queue-name). Kueue's own
// job integrations do the same through its jobframework:
//   - the job's gang is a Workload (operator/render/workload.h) that the job owns; no worker pod is
//     created until Kueue admits it (phase Queued, condition Admitted=False with Kueue's reason);
//   - once admitted, the pods get the admitted ResourceFlavors' node labels and tolerations;
//   - when Kueue evicts the Workload (a preemption, spec.active=false, a stopped queue), the gang
//     is stopped the way a node drain stops it: SIGTERM, and the trainer writes a checkpoint in
//     runPolicy.terminationGracePeriodSeconds. Once no worker is left, the quota reservation is
//     given back (admission cleared, QuotaReserved=False, Admitted=False, Requeued) and the job
//     queues again; re-admitted, the new gang resumes from that checkpoint. Not a failure: it
//     does not count against backoffLimit;
//   - runPolicy.suspend sets the Workload's spec.active=false (Kueue evicts it, releasing the
//     quota) and false again reactivates it. spec.active is written only when runPolicy.suspend
//     changes (kueue::kAnnotationAppliedSuspend): a Workload someone else deactivated stays so,
//     its gang stopped as an evicted one is and the job Queued (Admitted=False, Deactivated)
//     until the Workload is reactivated or the user toggles runPolicy.suspend;
//   - a finished job marks its Workload Finished (Succeeded or Failed).
// The preflight pod (no GPU) runs before the job joins the queue: a bad line fails the job
// without it ever waiting for quota.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/contracts.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/kube/kube_types.h"
#include "operator/kube/objects.h"
#include "operator/render/desired_objects.h"
#include "operator/render/workload.h"

namespace kubetune::op {

using nlohmann::json;

namespace {

const std::chrono::milliseconds kStopping{1000};  // waiting for evicted workers to go

std::string join_flavors(const std::map<std::string, std::string>& flavors) {
  std::string out;
  for (const auto& [resource, flavor] : flavors) {
    out += (out.empty() ? "" : ",") + resource + "=" + flavor;
  }
  return out;
}

std::string workload_item(const std::string& ns, const k8s::Workload& wl) {
  return kube::resources::kWorkloads.item(ns, kube::name_of(wl.metadata));
}

// spec.active: Kueue's default is true.
bool is_active(const k8s::Workload& wl) { return wl.spec.active.value_or(true); }

}  // namespace

std::optional<k8s::Workload> JobReconciler::current_workload(Pass& p) {
  const std::string want = kueue::workload_name(p.job);
  std::optional<k8s::Workload> current;
  for (const json& object : workloads_->list(p.ns, {{kLabelJob, p.name}})) {
    auto wl = object.get<k8s::Workload>();
    if (!owned_by(wl.metadata, p.uid())) continue;
    if (kube::name_of(wl.metadata) == want) {
      current = std::move(wl);
    } else if (!kube::being_deleted(wl.metadata)) {
      // Made for the spec before an edit (while suspended): its podSet is not the gang's now.
      client_.remove(workload_item(p.ns, wl));
    }
  }
  return current;
}

PassDecision JobReconciler::queue_unavailable(Pass& p, const std::string& message) {
  if (p.phase() != Phase::kQueued) p.status.phase = Phase::kQueued;
  const Condition* before = find_condition(p.status.conditions, ConditionType::kAdmitted);
  if (!before || before->message != message) {
    p.events.push_back({"Warning", Reason::kQueueUnavailable, message});
  }
  set_condition(p.status.conditions, ConditionType::kAdmitted, false, Reason::kQueueUnavailable,
                message, p.generation, p.now);
  return {{std::chrono::seconds(30)}};  // a WorkloadPriorityClass or Kueue may be installed later
}

void JobReconciler::mark_queued(Pass& p, Reason reason, const std::string& message) {
  if (p.phase() != Phase::kQueued) {
    p.status.phase = Phase::kQueued;
    p.events.push_back({"Normal", reason, message});
  }
  set_condition(p.status.conditions, ConditionType::kAdmitted, false, reason, message, p.generation,
                p.now);
}

std::optional<PassDecision> JobReconciler::admit(Pass& p) {
  const auto queue = kueue::queue_name(p.metadata);
  if (!queue) return std::nullopt;
  api::Queue& q = p.status.queue;
  q.local_queue = *queue;
  if (!workloads_) {
    return queue_unavailable(
        p, "the job names LocalQueue " + *queue + " (label " + kueue::kLabelQueueName +
               ") but the operator found no " + kueue::kApiVersion +
               " Workloads it may list when it started (Kueue not installed, or the operator's "
               "RBAC lacks them; its log says which): install Kueue and restart the operator, or "
               "remove the label");
  }
  const std::optional<k8s::Workload> wl = current_workload(p);
  if (!wl) return create_workload(p, *queue);
  q.workload = kube::name_of(wl->metadata);
  // Resumed by the user: the Workload active again (the next pass reads it).
  if (apply_suspend(p, *wl)) return PassDecision{{kShortRequeue}};
  const kueue::Admission a = kueue::read_admission(*wl);
  if (!is_active(*wl)) return deactivated(p, *wl, a);
  const Condition* admitted = find_condition(p.status.conditions, ConditionType::kAdmitted);
  if (admitted && admitted->reason == to_string(Reason::kDeactivated)) {
    const std::string message = "Workload " + *q.workload + " was reactivated";
    p.events.push_back({"Normal", Reason::kReactivated, message});
    set_condition(p.status.conditions, ConditionType::kAdmitted, false, Reason::kReactivated,
                  message + "; waiting for Kueue to admit it", p.generation, p.now);
  }
  if (a.evicted_reason && a.reserved) return stop_evicted(p, *wl, a);
  if (!a.admitted) {
    // After an eviction Kueue leaves Evicted=True until it admits the Workload again: the reason
    // stays in the condition while the job waits.
    const std::string waiting =
        "waiting for Kueue to admit Workload " + *q.workload + " in LocalQueue " + *queue;
    if (a.evicted_reason) {
      mark_queued(
          p, Reason::kWorkloadEvicted,
          "evicted (" + *a.evicted_reason + ": " + a.evicted_message + "); " + waiting + " again");
    } else {
      mark_queued(p, Reason::kQueued,
                  waiting + (a.pending_message.empty() ? "" : ": " + a.pending_message));
    }
    q.message = a.pending_message;
    return PassDecision{};  // the Workload's next change wakes us
  }
  p.workload = *wl;
  q.cluster_queue = a.cluster_queue;
  q.flavors = join_flavors(a.flavors);
  q.message.reset();
  p.flavors.clear();
  for (const auto& [resource, flavor] : a.flavors) {
    if (std::find(p.flavors.begin(), p.flavors.end(), flavor) == p.flavors.end()) {
      p.flavors.push_back(flavor);
    }
  }
  if (!condition_is_true(p.status.conditions, ConditionType::kAdmitted)) {
    const std::string message = "Kueue admitted Workload " + *q.workload + " in ClusterQueue " +
                                a.cluster_queue + " (" + *q.flavors + ")";
    p.events.push_back({"Normal", Reason::kAdmitted, message});
    set_condition(p.status.conditions, ConditionType::kAdmitted, true, Reason::kAdmitted, message,
                  p.generation, p.now);
  }
  return std::nullopt;
}

PassDecision JobReconciler::create_workload(Pass& p, const std::string& queue) {
  std::optional<kueue::Priority> priority;
  if (const auto name = kueue::priority_class(p.metadata)) {
    try {
      const auto pc = client_.get(kube::resources::kWorkloadPriorityClasses.item("", *name))
                          .get<k8s::WorkloadPriorityClass>();
      priority = kueue::Priority{*name, pc.value};
    } catch (const kube::ApiError& e) {
      if (!e.not_found()) throw;
      return queue_unavailable(p, "no WorkloadPriorityClass named " + *name + " (label " +
                                      kueue::kLabelPriorityClass + ")");
    }
  }
  const k8s::Workload object = kueue::workload(p.job, queue, priority);
  const std::string name = kube::name_of(object.metadata);
  create_children(p, [&] { ensure_child(p, kube::resources::kWorkloads, object); });
  p.status.queue.workload = name;
  mark_queued(p, Reason::kQueued,
              "created Workload " + name + " in LocalQueue " + queue +
                  (priority ? " with priority " + std::to_string(priority->value) + " (" +
                                  priority->class_name + ")"
                            : std::string()) +
                  "; no worker pod is created until Kueue admits it");
  return {};
}

PassDecision JobReconciler::stop_evicted(Pass& p, const k8s::Workload& wl,
                                         const kueue::Admission& a) {
  const std::string why = *a.evicted_reason + ": " + a.evicted_message;
  const int left = static_cast<int>(gang_pods(p).size());
  // First seen: counted once, because this status is stored before anything is deleted.
  const bool first_seen = condition_is_true(p.status.conditions, ConditionType::kAdmitted) ||
                          p.phase() != Phase::kQueued;
  if (first_seen) {
    p.status.queue.evictions = p.status.queue.evictions.value_or(0) + 1;
    p.status.workers.created = 0;
    const std::string message =
        "Kueue evicted Workload " + kube::name_of(wl.metadata) + " (" + why + "); stopping the " +
        std::to_string(left) +
        " workers with SIGTERM: they write a checkpoint and the gang resumes from it when "
        "admitted again";
    p.status.phase = Phase::kQueued;
    p.events.push_back({"Warning", Reason::kWorkloadEvicted, message});
    set_condition(p.status.conditions, ConditionType::kAdmitted, false, Reason::kWorkloadEvicted,
                  message, p.generation, p.now);
    if (condition_is_true(p.status.conditions, ConditionType::kRunning)) {
      set_condition(p.status.conditions, ConditionType::kRunning, false, Reason::kWorkloadEvicted,
                    why, p.generation, p.now);
    }
    p.after_store.push_back([this, &p] {
      if (metrics_) metrics_->evicted(p.ns, p.name);
    });
  }
  return stop_then_release(p, wl, a, left, first_seen);
}

PassDecision JobReconciler::stop_then_release(Pass& p, const k8s::Workload& wl,
                                              const kueue::Admission& a, int left, bool store) {
  if (left > 0) {
    delete_pods_after_store(p, true);
    return {{kStopping}, store};
  }
  // The gang is gone: once Kueue has evicted the Workload, its quota goes back so that Kueue can
  // queue it again.
  if (a.evicted_reason && a.reserved) {
    p.after_store.push_back([this, &p, wl, a] { release_quota(p, wl, a); });
  }
  return {};
}

PassDecision JobReconciler::deactivated(Pass& p, const k8s::Workload& wl,
                                        const kueue::Admission& a) {
  const int left = static_cast<int>(gang_pods(p).size());
  const std::string message =
      "Workload " + kube::name_of(wl.metadata) +
      " was deactivated (spec.active=false) by someone other than this job (an administrator, "
      "kueuectl stop workload): " +
      (left > 0 ? "stopping the " + std::to_string(left) +
                      " workers with SIGTERM (they write a checkpoint); "
                : std::string()) +
      "the job keeps its place and runs again when the Workload is reactivated, or when "
      "runPolicy.suspend is set to true and back to false";
  const Condition* before = find_condition(p.status.conditions, ConditionType::kAdmitted);
  if (!before || before->reason != to_string(Reason::kDeactivated)) {
    p.events.push_back({"Warning", Reason::kDeactivated, message});
    set_condition(p.status.conditions, ConditionType::kAdmitted, false, Reason::kDeactivated,
                  message, p.generation, p.now);
  }
  p.status.phase = Phase::kQueued;
  if (condition_is_true(p.status.conditions, ConditionType::kRunning)) {
    set_condition(p.status.conditions, ConditionType::kRunning, false, Reason::kDeactivated,
                  "the job's Workload was deactivated", p.generation, p.now);
  }
  if (left > 0) p.status.workers.created = 0;
  // As after any eviction; inactive, it holds no place in the ClusterQueue. Then the Workload's
  // next change wakes us.
  return stop_then_release(p, wl, a, left, true);
}

bool JobReconciler::apply_suspend(Pass& p, const k8s::Workload& wl) {
  const bool suspend = p.job.spec.run_policy.suspend;
  if (kueue::applied_suspend(wl) == suspend) return false;
  k8s::Workload updated = wl;
  updated.spec.active = !suspend;
  updated.metadata.annotations[kueue::kAnnotationAppliedSuspend] = suspend ? "true" : "false";
  client_.update(workload_item(p.ns, wl), updated);
  return true;
}

void JobReconciler::release_quota(Pass& p, const k8s::Workload& wl, const kueue::Admission& a) {
  k8s::Workload released = wl;
  kueue::unset_quota_reservation(released, *a.evicted_reason, a.evicted_message,
                                 format_time(p.now));
  const std::string name = kube::name_of(wl.metadata);
  client_.update_status(kube::resources::kWorkloads.item(p.ns, name), released);
  spdlog::info("{}: released the quota of evicted Workload {}", p.key, name);
}

void JobReconciler::sync_workload(Pass& p) {
  if (!workloads_ || !kueue::queue_name(p.metadata)) return;
  const std::optional<k8s::Workload> wl = current_workload(p);
  if (!wl) return;
  const std::string item = workload_item(p.ns, *wl);
  const kueue::Admission a = kueue::read_admission(*wl);
  if (is_finished(p.phase())) {
    if (a.finished) return;
    k8s::Workload done = *wl;
    const bool ok = p.phase() == Phase::kSucceeded;
    const Condition* c = find_condition(p.status.conditions,
                                        ok ? ConditionType::kSucceeded : ConditionType::kFailed);
    kueue::set_workload_condition(done, "Finished", true, ok ? "Succeeded" : "Failed",
                                  c ? c->message : "", format_time(p.now));
    client_.update_status(item, done);
    return;
  }
  // runPolicy.suspend -> spec.active, when the user changed it: a suspended job holds no quota.
  if (apply_suspend(p, *wl)) return;
  // Suspended: the pods are gone (suspend() deleted them); give the quota back once evicted.
  if (!is_active(*wl) && p.job.spec.run_policy.suspend && a.evicted_reason && a.reserved &&
      gang_pods(p).empty())
    release_quota(p, *wl, a);
}

void JobReconciler::sync_pods_ready(Pass& p, const GangState& g) {
  if (!p.workload) return;
  k8s::Workload wl = *p.workload;
  const k8s::Condition* before = kueue::workload_condition(*p.workload, "PodsReady");
  // jobframework's generatePodsReadyCondition: Started (Recovered after a recovery) once ready;
  // WaitForRecovery after having been ready; WaitForStart before.
  const std::string was = before ? before->reason : "";
  const bool ready = g.running + g.succeeded == g.replicas;
  bool status = ready;
  std::string reason = "WaitForStart", message = "Not all pods are ready or succeeded";
  if (ready) {
    reason = was == "WaitForRecovery" || was == "Recovered" ? "Recovered" : "Started";
    message = "All pods reached readiness and the workload is running";
  } else if ((before && before->status == "True") || was == "WaitForRecovery") {
    reason = "WaitForRecovery";
    message = "At least one pod has failed, waiting for recovery";
  }
  if (before && before->status == (status ? "True" : "False") && was == reason) return;
  kueue::set_workload_condition(wl, "PodsReady", status, reason, message, format_time(p.now));
  try {
    p.workload = client_.update_status(workload_item(p.ns, wl), wl).get<k8s::Workload>();
  } catch (const kube::ApiError& e) {
    if (!e.conflict()) throw;  // Kueue wrote in between: the next pass writes it again
  }
}

}  // namespace kubetune::op
