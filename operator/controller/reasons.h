// The reasons of a FineTuneJob's conditions and events: machine-readable CamelCase words, as
// Kubernetes conventions ask, each written once here. What happened in detail goes in the message.
#pragma once

#include <string>

#include "common/finetunejob_types.h"

namespace kubetune::op {

enum class Reason {
  // A worker pod ended or vanished (gang.cpp); retried up to backoffLimit unless ConfigError.
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
};

std::string to_string(Reason reason);

// The reason a preflight verdict gives the Failed condition (OK gives Passed).
Reason reason_for(api::PreflightVerdict verdict);

}  // namespace kubetune::op
