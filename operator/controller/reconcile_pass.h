// The state of one JobReconciler::reconcile call, shared by the files that implement it
// (reconciler.cpp, preflight_pod.cpp, progress_watch.cpp, scheduling.cpp, queueing.cpp), and the
// small facts about pods that they read alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/contracts.h"
#include "operator/controller/reconciler.h"
#include "operator/kube/kube_types.h"
#include "operator/kube/objects.h"

namespace kubetune::op {

struct JobReconciler::Pass {
  std::string ns, name, key;
  nlohmann::json obj;                 // the job as read (its resourceVersion guards the write)
  k8s::ObjectMeta metadata;           // obj's metadata, typed: set wherever obj is
  api::FineTuneJobStatus old_status;  // status as read
  api::FineTuneJobStatus status;      // status being computed
  long generation = 0;
  FineTuneJob job;
  SystemTime now;
  struct Event {
    std::string type;
    Reason reason;
    std::string message;
  };
  std::vector<Event> events;              // recorded once the status that they describe is stored
  std::vector<std::string> flavors;       // Kueue's admitted ResourceFlavors, applied to new pods
  std::optional<k8s::Workload> workload;  // Kueue's admitted Workload of this job, if any
  // What the decision implies once its status is stored, in order: deletions that a stale pass
  // must not make (its write fails with 409 first), and what other objects say about the job
  // (its Workload, the operator's counters).
  std::vector<std::function<void()>> after_store;

  std::string item() const { return kube::resources::kFineTuneJobs.item(ns, name); }
  std::string uid() const { return metadata.uid.value_or(""); }
  std::optional<Phase> phase() const { return status.phase; }
};

inline constexpr std::chrono::milliseconds kShortRequeue{300};  // pods of an old gang to go

// A requeue delay that lands just after `when`.
inline std::chrono::milliseconds until(SystemTime now, SystemTime when) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(1),
                  std::chrono::duration_cast<milliseconds>(when - now) + milliseconds(1));
}

// The gang a pod belongs to (kubetune.io/attempt).
inline int attempt_of(const k8s::Pod& pod) {
  try {
    return std::stoi(kube::label(pod.metadata, kLabelAttempt));
  } catch (const std::exception&) {  // no such label, or not a number
    return 0;
  }
}

inline bool is_terminal(const k8s::Pod& pod) {
  const std::string phase = pod.status.phase.value_or("");
  return phase == "Succeeded" || phase == "Failed";
}

// The spec hash a pod was made from; "" for pods of an operator from before the hash.
inline std::string spec_hash_of(const k8s::Pod& pod) {
  return kube::annotation(pod.metadata, kAnnotationSpecHash);
}

}  // namespace kubetune::op
