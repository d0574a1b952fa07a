// The state of one JobReconciler::reconcile call, shared by the files that implement it
// (reconciler.cpp, scheduling.cpp, queueing.cpp).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "operator/controller/reconciler.h"
#include "operator/kube/kube_types.h"

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

  std::string item() const { return kube::resources::kFineTuneJobs.item(ns, name); }
  std::string uid() const { return metadata.uid.value_or(""); }
  std::optional<Phase> phase() const { return status.phase; }
};

// A requeue delay that lands just after `when`.
inline std::chrono::milliseconds until(SystemTime now, SystemTime when) {
  using std::chrono::milliseconds;
  return std::max(milliseconds(1),
                  std::chrono::duration_cast<milliseconds>(when - now) + milliseconds(1));
}

}  // namespace kubetune::op
