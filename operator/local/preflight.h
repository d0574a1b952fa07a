// The trainer's preflight (`kubetune-trainer preflight`) for a FineTuneJob, on this machine's CPU:
// `kubetune plan` prints its report, `kubetune run` runs it before starting any worker, so a bad
// dataset line or a job too big for its GPUs fails in seconds, with the line or the estimate named.
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "operator/api/job.h"
#include "operator/api/preflight_report.h"

namespace kubetune::op::local {

struct PreflightResult {
  int exit_code = 0;   // the trainer's: 0 ok, kExitUserError for DatasetInvalid / DoesNotFit
  std::string output;  // its stdout: the JSON report
  std::optional<api::PreflightReport> report;  // parsed; none when the trainer printed none
};

// Writes the job's trainer config into `work_dir` and runs `trainer preflight` on it for the
// job's world size (replicas x GPUs per pod) and workers.gpuMemoryGiB. The trainer's log lines
// (stderr) pass through to ours.
PreflightResult run_preflight(const FineTuneJob& job, const std::string& trainer,
                              const std::string& work_dir);

}  // namespace kubetune::op::local
