#include "operator/policy/gang_policy.h"

#include "common/contracts.h"

namespace kubetune::op {

WorkerFailure exited(int rank, const std::string& who, int code, const std::string& why,
                     const std::string& detail) {
  WorkerFailure f;
  f.rank = rank;
  f.permanent = code == kExitUserError && why != "OOMKilled";
  f.reason = f.permanent          ? Reason::kConfigError
             : why == "OOMKilled" ? Reason::kOOMKilled
                                  : Reason::kWorkerFailed;
  f.message = who + " exited with code " + std::to_string(code) +
              (why.empty() ? "" : " (" + why + ")") +
              (f.permanent ? ": configuration or data error, not retried" : "");
  if (!detail.empty()) f.message += ": " + detail;
  return f;
}

namespace {

// A kubetune-fetch container (fetch or publish) that failed, classified by its exit code;
// `reason` replaces the classification's for all but a kill for memory.
WorkerFailure tool_failed(int rank, const std::string& who, const FetchEnd& end,
                          std::optional<Reason> reason, const std::string& not_retried) {
  const FetchExit c = classify_fetch_exit(end.exit_code.value_or(-1), end.reason);
  WorkerFailure f;
  f.rank = rank;
  f.reason = reason && c.reason != Reason::kOOMKilled ? *reason : c.reason;
  f.permanent = c.permanent;
  f.message = who + " exited with code " + std::to_string(end.exit_code.value_or(-1)) +
              (end.reason.empty() ? "" : " (" + end.reason + ")") +
              (c.permanent ? ": " + not_retried + ", not retried" : "");
  if (!end.error.empty()) f.message += ": " + end.error;
  return f;
}

}  // namespace

WorkerFailure fetch_failed(int rank, const std::string& who, const FetchEnd& fetch) {
  return tool_failed(rank, who, fetch, std::nullopt, "a source cannot be fetched");
}

WorkerFailure publish_failed(int rank, const std::string& who, const FetchEnd& publish) {
  return tool_failed(rank, who, publish, Reason::kPublishFailed, "the output cannot be published");
}

WorkerFailure stalled_failure(long timeout_seconds, std::optional<int64_t> last_step) {
  const std::string step = last_step ? "step " + std::to_string(*last_step) : "no step";
  return WorkerFailure{0, Reason::kStalled,
                       "rank 0 has not finished a step for " + std::to_string(timeout_seconds) +
                           " s (runPolicy.stallTimeoutSeconds; last seen: " + step + ")",
                       false};
}

GangDecision next(const WorkerFailure& failure, int64_t restarts, int limit) {
  if (failure.permanent) return {false, failure.reason, failure.message};
  if (restarts >= limit) {
    return {false, Reason::kBackoffLimitExceeded,
            "the gang failed " + std::to_string(restarts + 1) + " times (backoffLimit " +
                std::to_string(limit) + "); last failure: " + failure.message};
  }
  return {true, failure.reason,
          failure.message + "; restarting all workers (restart " + std::to_string(restarts + 1) +
              " of " + std::to_string(limit) + "), resuming from the last checkpoint"};
}

}  // namespace kubetune::op
