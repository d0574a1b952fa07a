// Whether a checkpoint that loads cleanly (checkpoint.h verified its files) belongs to this run:
// the same method, every trainable tensor and its optimizer moments present with the model's
// shapes, and a step this run's schedule reaches. A copy_ from a tensor of another shape would
// broadcast silently (a [1] norm weight becoming 128 copies of one value), so shapes are compared
// before anything is restored.
#pragma once

#include <cstddef>

#include "common/train_config.h"
#include "trainer/inputs/run_inputs.h"
#include "trainer/loop/checkpoint.h"

namespace kubetune::train {

// Throws CheckpointUnusable saying why `checkpoint` cannot be resumed by a run of `config` with
// these trainable parameters, `world` processes and `examples` training examples.
void check_resumable(const CheckpointContents& checkpoint, const TrainConfig& config,
                     const NamedParams& trainable, int world, size_t examples);

}  // namespace kubetune::train
