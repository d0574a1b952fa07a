// Gang scheduling, as the reconciler sees it: the kube-scheduler places worker pods one at a time,
// so a gang can end up partly placed, its bound workers holding GPUs while they wait at the
// rendezvous for a worker that has no room. That is never silent here: the Scheduled condition,
// an event, status.scheduling and the operator's metrics name it while it lasts, and after
// runPolicy.schedulingTimeoutSeconds the whole gang is deleted (its GPUs freed) and created again
// after a back-off. A gang of which no worker is bound holds nothing and waits as it is.
#include <algorithm>

#include "operator/controller/reconcile_pass.h"

namespace kubetune::op {

namespace {

using std::chrono::seconds;

// 30 s, 60 s, 120 s, ... at most 10 minutes: the n-th release waits this long.
seconds release_backoff(int64_t releases) {
  const int64_t doublings = std::clamp<int64_t>(releases - 1, 0, 5);
  return std::min(seconds(30) * (int64_t{1} << doublings), seconds(600));
}

int gpus_of(const FineTuneJob& job, int workers) {
  return workers * job.spec.workers.gpus_per_worker;
}

}  // namespace

std::optional<PassDecision> JobReconciler::wait_after_release(Pass& p) {
  api::Scheduling& s = p.status.scheduling;
  if (!s.next_attempt_time) return std::nullopt;
  // The released gang's pods go first (they may take their grace period); then the back-off.
  const int left = delete_pods(p, true);
  const SystemTime next = parse_time(*s.next_attempt_time);
  if (left > 0 || p.now < next) {
    return PassDecision{{left > 0 ? kShortRequeue : until(p.now, next)}};
  }
  s.next_attempt_time.reset();
  return std::nullopt;
}

std::optional<PassDecision> JobReconciler::observe_scheduling(Pass& p, const GangState& g) {
  const Placement& placed = g.placement;
  api::Scheduling& s = p.status.scheduling;
  s.bound_workers = placed.bound;
  s.unscheduled_workers = placed.unschedulable;
  const int held = placed.unschedulable > 0 ? gpus_of(p.job, placed.bound) : 0;
  s.held_gpus = held;

  if (placed.unschedulable == 0) {
    s.partially_scheduled_since.reset();
    if (placed.bound == g.replicas) {
      set_condition(p.status.conditions, ConditionType::kScheduled, true, Reason::kAllScheduled,
                    "all " + std::to_string(g.replicas) + " workers are placed on nodes",
                    p.generation, p.now);
    }
    return std::nullopt;
  }

  const std::string waiting = std::to_string(placed.unschedulable) + " of " +
                              std::to_string(g.replicas) + " workers cannot be scheduled; " +
                              placed.message;
  const long timeout = p.job.spec.run_policy.scheduling_timeout_seconds;
  Reason reason = Reason::kUnschedulable;
  std::string message = waiting + " (no worker is bound: nothing is held)";
  std::optional<PassDecision> result;
  if (placed.bound > 0) {
    reason = Reason::kPartiallyScheduled;
    if (!s.partially_scheduled_since) s.partially_scheduled_since = format_time(p.now);
    const SystemTime since = parse_time(*s.partially_scheduled_since);
    message = waiting + "; the " + std::to_string(placed.bound) + " bound workers hold " +
              std::to_string(held) + " GPUs meanwhile";
    if (timeout > 0) {
      const SystemTime deadline = since + seconds(timeout);
      if (p.now >= deadline) return release_gang(p, waiting, held);
      message += "; the gang is released at runPolicy.schedulingTimeoutSeconds=" +
                 std::to_string(timeout) + " unless the rest is placed";
      result = PassDecision{{until(p.now, deadline)}};
    }
  } else {
    s.partially_scheduled_since.reset();
  }
  const Condition* before = find_condition(p.status.conditions, ConditionType::kScheduled);
  if (!before || before->reason != to_string(reason)) {
    p.events.push_back({"Warning", reason, message});
  }
  set_condition(p.status.conditions, ConditionType::kScheduled, false, reason, message,
                p.generation, p.now);
  return result;
}

PassDecision JobReconciler::release_gang(Pass& p, const std::string& waiting, int held) {
  api::Scheduling& s = p.status.scheduling;
  s.releases = s.releases.value_or(0) + 1;
  const seconds backoff = release_backoff(*s.releases);
  s.next_attempt_time = format_time(p.now + backoff);
  s.partially_scheduled_since.reset();
  s.bound_workers = 0;
  s.held_gpus = 0;
  p.status.workers.created = 0;
  p.status.phase = Phase::kPending;
  const std::string message =
      "the gang was partly scheduled for runPolicy.schedulingTimeoutSeconds=" +
      std::to_string(p.job.spec.run_policy.scheduling_timeout_seconds) + " (" + waiting +
      "); deleted all workers to free the " + std::to_string(held) +
      " GPUs they held; creating the gang again at " + *s.next_attempt_time + " (release " +
      std::to_string(*s.releases) + ")";
  p.events.push_back({"Warning", Reason::kSchedulingTimeout, message});
  set_condition(p.status.conditions, ConditionType::kScheduled, false, Reason::kSchedulingTimeout,
                message, p.generation, p.now);
  // As for a restart: the status is stored first, so a stale pass deletes nothing.
  p.after_store.push_back([this, &p] {
    if (metrics_) metrics_->released_gang(p.ns, p.name);
  });
  delete_pods_after_store(p, true);
  return {{kShortRequeue}};
}

}  // namespace kubetune::op
