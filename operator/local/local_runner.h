// `kubetune run job.yaml`: a FineTuneJob on this machine, without a cluster. The pods the operator
// would create (desired_objects) become local processes with the same command line and
// environment, MASTER_ADDR 127.0.0.1, the trainer binary from next to `kubetune` or
// $KUBETUNE_TRAINER, local GPUs split between the workers when there are any; and the same
// policy as the operator: the gang restarts together after a retryable failure, up to
// runPolicy.backoffLimit, and a configuration/data error (exit code 2) fails at once.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

#include "operator/api/job.h"

namespace kubetune::op::local {

struct LocalRunOptions {
  std::string trainer;   // path of kubetune-trainer
  std::string work_dir;  // config files go here; "" = <output.dir>/.kubetune-local
  int local_gpus = -1;   // -1 = count /dev/nvidia<N>
  std::chrono::milliseconds grace{10000};            // SIGTERM -> SIGKILL
  std::chrono::milliseconds progress_period{10000};  // how often progress is printed
};

// Exit status of the run: 0 succeeded, 2 permanent (configuration/data) error, 1 other failure.
int run_local(const FineTuneJob& job, const LocalRunOptions& options, std::ostream& out);

// The trainer next to the running executable, else $KUBETUNE_TRAINER, else "kubetune-trainer".
std::string default_trainer_path(const std::string& argv0);

}  // namespace kubetune::op::local
