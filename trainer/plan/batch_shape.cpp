#include "trainer/plan/batch_shape.h"

#include <string>

namespace kubetune::train {

int64_t configured_global_batch(const TrainConfig& c, int world, int64_t resumed_global_batch) {
  if (resumed_global_batch > 0) return resumed_global_batch;
  if (c.training.global_batch_size > 0) return c.training.global_batch_size;
  return micro_batch_size(c) * c.training.gradient_accumulation_steps * world;
}

BatchShape batch_shape(const TrainConfig& c, int world, int64_t resumed_global_batch) {
  const int64_t global = configured_global_batch(c, world, resumed_global_batch);
  const int64_t per_step = micro_batch_size(c) * world;
  if (global % per_step != 0)
    throw ConfigError(
        {"training.globalBatchSize: " + std::to_string(global) +
         " is not a multiple of microBatchSize x world size = " + std::to_string(per_step)});
  return {global, global / per_step};
}

int64_t total_steps(const TrainConfig& c, int64_t steps_per_epoch) {
  return c.training.max_steps > 0 ? c.training.max_steps : c.training.epochs * steps_per_epoch;
}

}  // namespace kubetune::train
