#include "operator/policy/reasons.h"

#include <array>
#include <utility>

namespace kubetune::op {

std::string to_string(Reason reason) {
  static constexpr std::array<std::pair<Reason, const char*>, 45> kNames = {{
      {Reason::kWorkerFailed, "WorkerFailed"},
      {Reason::kConfigError, "ConfigError"},
      {Reason::kOOMKilled, "OOMKilled"},
      {Reason::kEvicted, "Evicted"},
      {Reason::kNodeLost, "NodeLost"},
      {Reason::kWorkerDeleted, "WorkerDeleted"},
      {Reason::kWorkerLost, "WorkerLost"},
      {Reason::kStalled, "Stalled"},
      {Reason::kGangCreated, "GangCreated"},
      {Reason::kAllWorkersRunning, "AllWorkersRunning"},
      {Reason::kGangRunning, "GangRunning"},
      {Reason::kCompleted, "Completed"},
      {Reason::kBackoffLimitExceeded, "BackoffLimitExceeded"},
      {Reason::kDeadlineExceeded, "DeadlineExceeded"},
      {Reason::kInvalidSpec, "InvalidSpec"},
      {Reason::kSpecAccepted, "SpecAccepted"},
      {Reason::kSuspended, "Suspended"},
      {Reason::kResumed, "Resumed"},
      {Reason::kAllScheduled, "AllScheduled"},
      {Reason::kUnschedulable, "Unschedulable"},
      {Reason::kOutOfMemoryRecovered, "OutOfMemoryRecovered"},
      {Reason::kPartiallyScheduled, "PartiallyScheduled"},
      {Reason::kSchedulingTimeout, "SchedulingTimeout"},
      {Reason::kQueued, "Queued"},
      {Reason::kAdmitted, "Admitted"},
      {Reason::kWorkloadEvicted, "WorkloadEvicted"},
      {Reason::kDeactivated, "Deactivated"},
      {Reason::kReactivated, "Reactivated"},
      {Reason::kQueueUnavailable, "QueueUnavailable"},
      {Reason::kFailedCreate, "FailedCreate"},
      {Reason::kNameConflict, "NameConflict"},
      {Reason::kWaitingForOldObjects, "WaitingForOldObjects"},
      {Reason::kAdopted, "Adopted"},
      {Reason::kPreflightStarted, "PreflightStarted"},
      {Reason::kChecking, "Checking"},
      {Reason::kPassed, "Passed"},
      {Reason::kPreflightPassed, "PreflightPassed"},
      {Reason::kPreflightRetry, "PreflightRetry"},
      {Reason::kPreflightFailed, "PreflightFailed"},
      {Reason::kDatasetInvalid, "DatasetInvalid"},
      {Reason::kDoesNotFit, "DoesNotFit"},
      {Reason::kInputInvalid, "InputInvalid"},
      {Reason::kSourceUnavailable, "SourceUnavailable"},
      {Reason::kSourcesFetched, "SourcesFetched"},
      {Reason::kPublishFailed, "PublishFailed"},
  }};
  for (const auto& [r, name] : kNames) {
    if (r == reason) return name;
  }
  return "Unknown";
}

Reason reason_for(api::PreflightVerdict verdict) {
  switch (verdict) {
    case api::PreflightVerdict::kOK:
      return Reason::kPassed;
    case api::PreflightVerdict::kDatasetInvalid:
      return Reason::kDatasetInvalid;
    case api::PreflightVerdict::kDoesNotFit:
      return Reason::kDoesNotFit;
    case api::PreflightVerdict::kInputInvalid:
      break;
  }
  return Reason::kInputInvalid;
}

}  // namespace kubetune::op
