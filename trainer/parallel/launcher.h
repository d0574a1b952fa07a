// `kubetune-trainer launch`: a torchrun-compatible launcher that never leaves a job hanging.
//
// It starts one process per GPU (or N CPU workers) with the torchrun environment, prefixes every
// output line with the rank, forwards SIGTERM/SIGINT, and when any process exits non-zero or dies,
// stops the others within seconds and exits non-zero naming the rank and how it ended.
#pragma once

#include <string>
#include <vector>

#include "common/launch_contract.h"

namespace kubetune::parallel {

struct LaunchOptions {
  LaunchContract node;        // nproc_per_node 0 = auto: one per visible GPU, else 1
  double grace_seconds = 10;  // between SIGTERM and SIGKILL when stopping the others
};

// argv after "launch" (flags override the launch contract's environment); returns the launcher's
// exit status.
int launch_main(const std::vector<std::string>& args);

int launch(const LaunchOptions& options, const std::vector<std::string>& child_args);

}  // namespace kubetune::parallel
