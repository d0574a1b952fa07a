// How the global batch splits into processes, micro-batches and accumulation steps.
#pragma once

#include <cstdint>

#include "common/train_config.h"

namespace kubetune::train {

struct BatchShape {
  int64_t global_batch, accumulation;
};

// The global batch is what the user's results depend on, so it is fixed first: from the config,
// or, when resuming, from the checkpoint (a restart on another number of processes then changes
// the accumulation steps, not the batch). Throws ConfigError naming training.globalBatchSize
// when it does not split into micro-batches over `world` processes.
// The global batch alone (needs a numeric training.microBatchSize only when globalBatchSize is 0).
int64_t configured_global_batch(const TrainConfig& c, int world, int64_t resumed_global_batch);
BatchShape batch_shape(const TrainConfig& c, int world, int64_t resumed_global_batch);

// Optimizer steps of the whole run: training.maxSteps, else epochs x steps per epoch.
int64_t total_steps(const TrainConfig& c, int64_t steps_per_epoch);

}  // namespace kubetune::train
