// The memory model: what one training process holds on its GPU at its peak, by what holds it,
// from the model's config.json and the job's spec alone (no weights, no GPU). The preflight
// reports it, training.microBatchSize auto picks from it, and the trainer logs it beside the
// measured peak.
#pragma once

#include <cstdint>

#include "common/train_config.h"
#include "trainer/model/model_config.h"

namespace kubetune::train {

// Peak memory of one training process on its GPU, in bytes, by what holds it.
struct MemoryEstimate {
  int64_t frozen_weights = 0;     // bf16 base weights (LoRA; the linears in 4 bits for QLoRA)
  int64_t trainable_weights = 0;  // fp32 master weights
  int64_t gradients = 0;          // fp32, plus the buckets of a multi-process reduction
  int64_t optimizer_states = 0;   // AdamW's two fp32 moments (divided by the world if sharded)
  int64_t autocast_copies = 0;    // bf16 copies of fp32 weights cached by autocast in forward
  int64_t activations = 0;        // saved for backward (one micro-batch of maxLength rows)
  // Before training, under sharding full: the slices split so far, the root and the layer being
  // split (full_sharding.h: each layer is split as it loads). Not part of the sum above.
  int64_t loading = 0;
  // The peak: the larger of the training terms' sum and `loading`.
  int64_t total() const;
  api::MemoryReport to_report() const;  // in GiB, for the preflight report
};

// Trainable parameters of the method: all of them (full) or the LoRA adapters' A and B.
int64_t trainable_parameters(const model::ModelConfig& model, const TrainConfig& config);

// Our trainer's storage rules (trainer/inputs/run_inputs.cpp, trainer/optim/adamw.cpp,
// trainer/parallel/) with an activation cost per token and layer fitted to peaks measured on
// H100/H200 (bench/README.md, "Memory").
MemoryEstimate estimate_gpu_memory(const model::ModelConfig& model, const TrainConfig& config,
                                   int world_size);

}  // namespace kubetune::train
