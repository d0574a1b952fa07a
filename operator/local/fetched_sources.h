// The hf:// and s3:// sources of a job run by `kubetune run`, fetched on this machine.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "operator/api/job.h"

namespace kubetune::op::local {

// `kubetune run`'s fetch of the job's hf:// and s3:// sources (operator/render/sources.h), as the
// preflight pod's fetch container does it: kubetune-fetch ($KUBETUNE_FETCH, else on the PATH)
// into $KUBETUNE_SOURCE_CACHE (else ~/.cache/kubetune/sources), linked under `links_dir`. The
// job it returns reads them there. Its progress and errors pass through to our stderr; a fetch
// that fails throws FetchFailed with kubetune-fetch's exit code.
struct FetchFailed : std::runtime_error {
  FetchFailed(int code, const std::string& what) : std::runtime_error(what), exit_code(code) {}
  int exit_code;
};
// $HOME/.cache/kubetune: where `kubetune run` keeps what outlives a run (the sources' cache, the
// work folders of jobs with s3:// outputs).
std::string kubetune_cache_dir();
// kubetune-fetch with `args`: its stdout (its stderr passes through); FetchFailed when it cannot
// be run or exits other than 0.
std::string run_kubetune_fetch(const std::vector<std::string>& args);
FineTuneJob with_fetched_sources(const FineTuneJob& job, const std::string& links_dir);

}  // namespace kubetune::op::local
