// Gang semantics: the workers of a job live and die together. This reads the pods of the current
// gang as the kubelet reports them and says what the gang as a whole is doing, and classifies a
// failure as permanent (the trainer's exit code 2: configuration or data error; its fetch
// container's exit code 2: a source that cannot be fetched; retrying cannot help) or retryable
// (any other exit code or signal, eviction, lost node, deleted pod).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "operator/kube/kube_types.h"
#include "operator/policy/reasons.h"

namespace kubetune::op {

struct WorkerFailure {
  int rank = -1;
  Reason reason = Reason::kWorkerFailed;
  std::string message;  // for humans: which pod, which exit code
  bool permanent = false;
};

// Where the scheduler has put the gang's live workers (those neither ended nor being deleted).
struct Placement {
  int bound = 0;          // spec.nodeName set: on a node, holding its resources
  int unschedulable = 0;  // PodScheduled=False with reason Unschedulable
  std::string message;    // the scheduler's reason for the first unschedulable worker, named
};

struct GangState {
  int replicas = 0;
  std::vector<std::optional<k8s::Pod>> pods;  // by rank; nullopt = no such pod
  int pending = 0, running = 0, succeeded = 0, failed = 0;
  std::vector<int> missing;              // ranks without a pod
  std::optional<WorkerFailure> failure;  // the first failed worker (permanent ones first)
  Placement placement;

  bool all_running() const { return running == replicas; }
  bool all_succeeded() const { return succeeded == replicas; }
  int active() const { return pending + running; }
};

// Keeps of a pod what the operator reads (its metadata, status and spec.nodeName) and drops the
// rest of its spec: the pod cache holds every pod of every job, finished ones too (kept for their
// logs), and the spec is most of a pod's bytes. Nothing may write a pod back from the cache.
void keep_what_is_read(nlohmann::json& pod);

// `pods`: the pods of one gang (one attempt); ranks come from their kubetune.io/rank label.
GangState assess_gang(const std::vector<k8s::Pod>& pods, int replicas);

// nullopt when the pod has not failed.
std::optional<WorkerFailure> pod_failure(const k8s::Pod& pod, int rank);

// The pod's trainer container has ended with exit code 0 (rank 0's publish container may still
// run beside it: render/publish.h).
bool trainer_succeeded(const k8s::Pod& pod);

}  // namespace kubetune::op
