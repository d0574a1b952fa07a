#include "trainer/train/batch_shape.h"

#include <string>

namespace kubetune::train {

BatchShape batch_shape(const TrainConfig& c, int world, int64_t resumed_global_batch) {
  int64_t global = c.training.global_batch_size > 0
                       ? c.training.global_batch_size
                       : static_cast<int64_t>(c.training.micro_batch_size) *
                             c.training.gradient_accumulation_steps * world;
  if (resumed_global_batch > 0) global = resumed_global_batch;
  const int64_t per_step = static_cast<int64_t>(c.training.micro_batch_size) * world;
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
