// Who watches a run: the progress line and history files on rank 0, Prometheus on every rank.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "common/train_config.h"
#include "trainer/metrics/step_stats.h"
#include "trainer/parallel/dist_env.h"

namespace kubetune::train {

std::vector<std::unique_ptr<TrainingObserver>> make_observers(const TrainConfig& config,
                                                              const parallel::DistEnv& env,
                                                              const torch::Device& device);

}  // namespace kubetune::train
