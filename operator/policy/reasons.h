// The reasons of a FineTuneJob's conditions and events: machine-readable CamelCase words, as
// Kubernetes conventions ask, each written once here. What happened in detail goes in the message.
#pragma once

#include <string>

#include "common/finetunejob_types.h"

namespace kubetune::op {

enum class Reason {
  // A worker pod ended or vanished (gang.cpp); retried up to backoffLimit unless ConfigError or
  // SourceUnavailable.
  kWorkerFailed,
  kConfigError,  // the trainer's exit code 2: configuration or data error, never retried
  kOOMKilled,
  kEvicted,
  kNodeLost,
  kWorkerDeleted,
  kWorkerLost,  // its pod disappeared after the gang was created
  kStalled,     // rank 0's step stopped advancing (runPolicy.stallTimeoutSeconds)
  // The job's lifecycle.
  kGangCreated,
  kAllWorkersRunning,
  kGangRunning,  // a restarted gang runs again
  kCompleted,
  kBackoffLimitExceeded,
  kDeadlineExceeded,
  kInvalidSpec,
  kSpecAccepted,
  kSuspended,
  kResumed,
  kOutOfMemoryRecovered,  // a step ran out of GPU memory and was re-run at a smaller micro-batch
  // Placement of the current gang by the scheduler (the Scheduled condition).
  kAllScheduled,
  kUnschedulable,       // no worker bound yet: nothing held, the gang waits as it is
  kPartiallyScheduled,  // some workers bound (holding GPUs) while another cannot be placed
  kSchedulingTimeout,   // ... for runPolicy.schedulingTimeoutSeconds: the gang was deleted
  // Kueue (the Admitted condition).
  kQueued,
  kAdmitted,
  kWorkloadEvicted,   // Kueue took the admission back: the gang stops through its checkpoint
  kDeactivated,       // someone else set the Workload's spec.active=false: stopped until undone
  kReactivated,       // ... and set it back
  kQueueUnavailable,  // the Workload cannot be made (no Kueue API, a refused object)
  // Children the job needs.
  kFailedCreate,
  kNameConflict,
  kWaitingForOldObjects,
  kAdopted,
  // The preflight pod (runPolicy.preflight); its verdicts are reasons too (reason_for).
  kPreflightStarted,
  kChecking,
  kPassed,
  kPreflightPassed,
  kPreflightRetry,
  kPreflightFailed,
  kDatasetInvalid,
  kDoesNotFit,
  kInputInvalid,
  // An hf:// or s3:// source cannot be fetched (not found, unauthorised): any pod's fetch
  // container exited kExitUserError (fetch_end.h), the preflight pod's or a worker's.
  kSourceUnavailable,
  kSourcesFetched,  // the preflight's fetch container resolved and cached every source
  // Rank 0's publish container (render/publish.h: GGUF files, an s3:// output.dir) failed after
  // the trainer ended well; its exit code 2 (access denied, no bucket, no model to convert) is
  // not retried.
  kPublishFailed,
};

std::string to_string(Reason reason);

// The reason a preflight verdict gives the Failed condition (OK gives Passed).
Reason reason_for(api::PreflightVerdict verdict);

}  // namespace kubetune::op
