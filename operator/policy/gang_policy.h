// The gang policy, defined once for both runners (the reconciler's pods and `kubetune run`'s
// processes): how a worker's end is classified, and what the gang does next. Side-effect free;
// each runner observes its workers its own way and carries the decision out its own way.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "operator/policy/fetch_end.h"
#include "operator/policy/gang.h"

namespace kubetune::op {

// A worker whose trainer ended with `code` (128 + N when killed by signal N): retryable, except
// the trainer's kExitUserError (configuration or data: retrying cannot help) unless the kernel
// killed it for memory (`why` OOMKilled, as the kubelet reports it). `who` names the worker for
// people ("worker 1 (pod x-worker-1)"); `why` and `detail` are added when not empty.
WorkerFailure exited(int rank, const std::string& who, int code, const std::string& why,
                     const std::string& detail);

// A worker whose fetch container failed (fetch.failed()) before its trainer ran, classified as
// every fetch container is (classify_fetch_exit).
WorkerFailure fetch_failed(int rank, const std::string& who, const FetchEnd& fetch);
// Rank 0's publish container failed after its trainer ended well (PublishFailed): exit code 2
// (access denied, no bucket, no model folder to convert) is permanent; anything else restarts
// the gang, which resumes from its last checkpoint.
WorkerFailure publish_failed(int rank, const std::string& who, const FetchEnd& publish);

// The stall watchdog's finding: rank 0's step has not advanced for runPolicy.stallTimeoutSeconds.
WorkerFailure stalled_failure(long timeout_seconds, std::optional<int64_t> last_step);

struct GangDecision {
  bool restart = false;  // false: the job fails
  Reason reason = Reason::kWorkerFailed;
  std::string message;
};

// After `failure`, with `restarts` gang restarts so far and runPolicy.backoffLimit `limit`:
// restart the whole gang from the last checkpoint, or fail the job.
GangDecision next(const WorkerFailure& failure, int64_t restarts, int limit);

}  // namespace kubetune::op
