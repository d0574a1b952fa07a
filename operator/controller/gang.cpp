#include "operator/controller/gang.h"

#include "common/contracts.h"
#include "operator/controller/gang_policy.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// The trainer container's terminated state, or null.
json terminated_state(const json& pod) {
  for (const auto& cs : pod["status"].value("containerStatuses", json::array())) {
    if (cs.value("name", "") != kTrainerContainer) continue;
    if (cs.contains("state") && cs["state"].contains("terminated"))
      return cs["state"]["terminated"];
    if (cs.contains("lastState") && cs["lastState"].contains("terminated")) {
      return cs["lastState"]["terminated"];
    }
  }
  return nullptr;
}

int rank_of(const json& pod) {
  const json labels = pod["metadata"].value("labels", json::object());
  try {
    return std::stoi(labels.value(kLabelRank, "-1"));
  } catch (const std::exception&) {
    return -1;
  }
}

// The pod's PodScheduled condition, or null.
json scheduled_condition(const json& pod) {
  for (const auto& c : pod.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == "PodScheduled") return c;
  }
  return nullptr;
}

void place(Placement& placement, const json& pod, int rank) {
  if (!pod.value("spec", json::object()).value("nodeName", "").empty()) {
    ++placement.bound;
    return;
  }
  const json c = scheduled_condition(pod);
  if (c.is_null() || c.value("status", "") != "False" || c.value("reason", "") != "Unschedulable") {
    return;  // not yet seen by the scheduler
  }
  if (placement.unschedulable++ == 0) {
    placement.message = "worker " + std::to_string(rank) + " (pod " +
                        pod.value("metadata", json::object()).value("name", "") +
                        "): " + c.value("message", "");
  }
}

}  // namespace

std::optional<WorkerFailure> pod_failure(const json& pod, int rank) {
  const json status = pod.value("status", json::object());
  const std::string phase = status.value("phase", "Pending");
  const std::string name = pod["metadata"].value("name", "");
  WorkerFailure f;
  f.rank = rank;
  if (phase == "Failed") {
    const json term = terminated_state(pod);
    const std::string pod_reason = status.value("reason", "");
    if (pod_reason == "Evicted") {
      f.reason = Reason::kEvicted;
      f.message = "worker " + std::to_string(rank) + " (pod " + name +
                  ") was evicted: " + status.value("message", "");
      return f;
    }
    if (term.is_null()) {
      f.reason = Reason::kWorkerFailed;  // the pod's own reason is in the message
      f.message = "worker " + std::to_string(rank) + " (pod " + name + ") failed" +
                  (pod_reason.empty() ? "" : ": " + pod_reason);
      return f;
    }
    const std::string detail = term.contains("message") ? term["message"].get<std::string>() : "";
    return exited(rank, "worker " + std::to_string(rank) + " (pod " + name + ")",
                  term.value("exitCode", 1), term.value("reason", ""), detail);
  }
  if (phase == "Unknown") {
    f.reason = Reason::kNodeLost;
    f.message = "worker " + std::to_string(rank) + " (pod " + name + ") lost contact with its node";
    return f;
  }
  if (pod["metadata"].contains("deletionTimestamp") && phase != "Succeeded") {
    f.reason = Reason::kWorkerDeleted;
    f.message = "worker " + std::to_string(rank) + " (pod " + name + ") was deleted";
    return f;
  }
  return std::nullopt;
}

GangState assess_gang(const std::vector<json>& pods, int replicas) {
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
    const json& pod = *g.pods[rank];
    if (auto f = pod_failure(pod, rank)) {
      ++g.failed;
      if (!g.failure || (f->permanent && !g.failure->permanent)) g.failure = f;
      continue;
    }
    const std::string phase = pod.value("status", json::object()).value("phase", "Pending");
    if (!pod["metadata"].contains("deletionTimestamp") && phase != "Succeeded") {
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
