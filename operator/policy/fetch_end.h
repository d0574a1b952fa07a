// A fetch container's end (hf:// and s3:// sources, render/sources.h), read once for every pod
// that has one: the preflight pod, whose fetch resolves the revisions, and each worker, whose
// fetch is pinned to them. kubetune-fetch exits with the trainer's codes (common/contracts.h), so
// one classification serves every pod kind: a source that cannot be fetched (kExitUserError: not
// found, unauthorised, changed) fails the job as SourceUnavailable; anything else is retried.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "common/finetunejob_types.h"
#include "operator/kube/kube_types.h"
#include "operator/policy/reasons.h"

namespace kubetune::op {

struct FetchEnd {
  std::string container;         // fetch, or publish (the same tool, the same exit codes)
  bool running = false;          // it runs now: its progress endpoint can be read
  std::optional<int> exit_code;  // set once it ended (the kubelet's terminated state)
  std::string reason;            // the kubelet's: Completed, Error, OOMKilled
  std::string results;           // exit 0: its termination message, the report (--results)
  // Otherwise: why, in one line: the last line of its termination message (the error
  // kubetune-fetch writes alone, or its last log line with FallbackToLogsOnError), at most
  // kFetchErrorChars.
  std::string error;
  // The kubelet cannot start it (CreateContainerConfigError): a Secret it takes its credentials
  // from (spec.sources.credentialsSecret) is missing. The kubelet's message, which names the
  // Secret; the pod would wait on it forever.
  std::string cannot_start;

  bool failed() const { return exit_code && *exit_code != 0; }
};

// Why a pod whose fetch container cannot start fails its job (SourceUnavailable, permanent):
// `who` names the pod ("worker 0 (pod x-worker-0)", "the preflight pod x-preflight").
std::string fetch_cannot_start_message(const std::string& who, const FetchEnd& fetch);

inline constexpr size_t kFetchErrorChars = 512;

// The pod's fetch container as the kubelet reports it; all empty when the pod has none (a job
// without remote sources) or the kubelet has not reported it yet.
FetchEnd read_fetch_end(const k8s::Pod& pod);
// Rank 0's publish container (render/publish.h), read the same way: kubetune-fetch publish
// exits with the same codes and writes its results (where each output went) the same way.
FetchEnd read_publish_end(const k8s::Pod& pod);

struct FetchExit {
  Reason reason = Reason::kWorkerFailed;
  bool permanent = false;  // retrying cannot help: the job fails
};

// What the exit `code` of a fetch container that failed means, for every pod kind. `why` is the
// kubelet's reason: a container it killed for memory (OOMKilled) is retried whatever its code.
FetchExit classify_fetch_exit(int code, const std::string& why);

// The fetch container's report (FetchEnd::results), or an empty list when it is not one.
std::vector<api::FetchedSource> parse_fetch_results(const std::string& termination_message);

}  // namespace kubetune::op
