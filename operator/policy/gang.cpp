#include "operator/policy/gang.h"

#include "common/contracts.h"
#include "operator/kube/objects.h"
#include "operator/policy/fetch_end.h"
#include "operator/policy/gang_policy.h"

namespace kubetune::op {
namespace {

// The trainer container's terminated state (its current one, else its last), or null.
const k8s::ContainerStateTerminated* terminated_state(const k8s::Pod& pod) {
  for (const auto& cs : pod.status.container_statuses) {
    if (cs.name != kTrainerContainer) continue;
    if (cs.state.terminated) return &*cs.state.terminated;
    if (cs.last_state.terminated) return &*cs.last_state.terminated;
  }
  return nullptr;
}

// The trainer container's current state when it has ended, or null.
const k8s::ContainerStateTerminated* trainer_ended_now(const k8s::Pod& pod) {
  for (const auto& cs : pod.status.container_statuses) {
    if (cs.name == kTrainerContainer && cs.state.terminated) return &*cs.state.terminated;
  }
  return nullptr;
}

int rank_of(const k8s::Pod& pod) {
  try {
    return std::stoi(kube::label(pod.metadata, kLabelRank));
  } catch (const std::exception&) {  // no rank label, or not a number
    return -1;
  }
}

// The pod's PodScheduled condition, or null.
const k8s::PodCondition* scheduled_condition(const k8s::Pod& pod) {
  for (const auto& c : pod.status.conditions) {
    if (c.type == "PodScheduled") return &c;
  }
  return nullptr;
}

std::string phase_of(const k8s::Pod& pod) { return pod.status.phase.value_or("Pending"); }

void place(Placement& placement, const k8s::Pod& pod, int rank) {
  if (!pod.spec.node_name.value_or("").empty()) {
    ++placement.bound;
    return;
  }
  const k8s::PodCondition* c = scheduled_condition(pod);
  if (!c || c->status != "False" || c->reason.value_or("") != "Unschedulable") {
    return;  // not yet seen by the scheduler
  }
  if (placement.unschedulable++ == 0) {
    placement.message = "worker " + std::to_string(rank) + " (pod " + kube::name_of(pod.metadata) +
                        "): " + c->message.value_or("");
  }
}

}  // namespace

std::optional<WorkerFailure> pod_failure(const k8s::Pod& pod, int rank) {
  const k8s::PodStatus& status = pod.status;
  const std::string phase = phase_of(pod);
  const std::string who =
      "worker " + std::to_string(rank) + " (pod " + kube::name_of(pod.metadata) + ")";
  WorkerFailure f;
  f.rank = rank;
  const auto trainer_exited = [&](const k8s::ContainerStateTerminated& term) {
    return exited(rank, who, term.exit_code, term.reason.value_or(""), term.message.value_or(""));
  };
  // A kubetune-fetch container the kubelet cannot start (its credentials Secret is missing).
  const auto cannot_start = [&](const FetchEnd& end, Reason reason) {
    f.reason = reason;
    f.permanent = true;
    f.message = fetch_cannot_start_message(who, end);
    return f;
  };
  if (phase == "Failed") {
    const k8s::ContainerStateTerminated* term = terminated_state(pod);
    const std::string pod_reason = status.reason.value_or("");
    if (pod_reason == "Evicted") {
      f.reason = Reason::kEvicted;
      f.message = who + " was evicted: " + status.message.value_or("");
      return f;
    }
    if (!term) {
      // Its fetch container (hf:// and s3:// sources, render/sources.h) failed before the
      // trainer ran: classified as every pod's fetch is (fetch_end.h).
      const FetchEnd fetch = read_fetch_end(pod);
      if (fetch.failed()) return fetch_failed(rank, who + ", fetching", fetch);
      f.reason = Reason::kWorkerFailed;  // the pod's own reason is in the message
      f.message = who + " failed" + (pod_reason.empty() ? "" : ": " + pod_reason);
      return f;
    }
    if (term->exit_code == 0) {
      // The trainer ended well and its publish container (render/publish.h) did not.
      const FetchEnd publish = read_publish_end(pod);
      if (publish.failed()) return publish_failed(rank, who + ", publishing", publish);
    }
    return trainer_exited(*term);
  }
  if (phase == "Running") {
    // A trainer that failed while rank 0's publish container still waits for it: the pod runs
    // on, but the worker has failed.
    const k8s::ContainerStateTerminated* term = trainer_ended_now(pod);
    if (term && term->exit_code != 0) return trainer_exited(*term);
  }
  if (phase == "Pending" || phase == "Running") {
    const FetchEnd publish = read_publish_end(pod);
    if (!publish.cannot_start.empty()) return cannot_start(publish, Reason::kPublishFailed);
  }
  if (phase == "Pending") {
    const FetchEnd fetch = read_fetch_end(pod);
    if (!fetch.cannot_start.empty()) return cannot_start(fetch, Reason::kSourceUnavailable);
  }
  if (phase == "Unknown") {
    f.reason = Reason::kNodeLost;
    f.message = who + " lost contact with its node";
    return f;
  }
  if (kube::being_deleted(pod.metadata) && phase != "Succeeded") {
    f.reason = Reason::kWorkerDeleted;
    f.message = who + " was deleted";
    return f;
  }
  return std::nullopt;
}

bool trainer_succeeded(const k8s::Pod& pod) {
  const k8s::ContainerStateTerminated* term = trainer_ended_now(pod);
  return term && term->exit_code == 0;
}

void keep_what_is_read(nlohmann::json& pod) {
  k8s::Pod full;
  try {
    full = pod.get<k8s::Pod>();
  } catch (const std::exception&) {
    return;  // kept whole: the reconcile that reads it reports what is wrong, as before the trim
  }
  k8s::Pod kept;
  kept.api_version = std::move(full.api_version);
  kept.kind = std::move(full.kind);
  kept.metadata = std::move(full.metadata);
  kept.status = std::move(full.status);
  kept.spec.node_name = std::move(full.spec.node_name);  // bound or not (Placement)
  pod = kept;
}

GangState assess_gang(const std::vector<k8s::Pod>& pods, int replicas) {
  GangState g;
  g.replicas = replicas;
  g.pods.resize(replicas);
  for (const auto& pod : pods) {
    const int rank = rank_of(pod);
    if (rank >= 0 && rank < replicas) g.pods[rank] = pod;
  }
  for (int rank = 0; rank < replicas; ++rank) {
    if (!g.pods[rank]) {
      g.missing.push_back(rank);
      continue;
    }
    const k8s::Pod& pod = *g.pods[rank];
    if (auto f = pod_failure(pod, rank)) {
      ++g.failed;
      if (!g.failure || (f->permanent && !g.failure->permanent)) g.failure = f;
      continue;
    }
    const std::string phase = phase_of(pod);
    if (!kube::being_deleted(pod.metadata) && phase != "Succeeded") {
      place(g.placement, pod, rank);
    }
    if (phase == "Succeeded") {
      ++g.succeeded;
    } else if (phase == "Running") {
      ++g.running;
    } else {
      ++g.pending;
    }
  }
  return g;
}

}  // namespace kubetune::op
