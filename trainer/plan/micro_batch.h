// How a run's global batch splits into micro-batches: as configured, or chosen
// (training.microBatchSize: auto) as the largest that the preflight's memory estimate fits on the
// GPU; and how far to go down when a step runs out of memory anyway (trainer/loop/step.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/train_config.h"
#include "trainer/model/model_config.h"

namespace kubetune::train {

// auto fills at most this share of the GPU's memory with the estimated peak. The estimate is
// within a few percent of measured peaks (bench/README.md, "Memory"); the rest is for what it
// does not count: the CUDA context, cuBLAS/NCCL workspaces and the caching allocator's
// fragmentation.
inline constexpr double kAutoMemoryFraction = 0.90;

struct MicroBatchChoice {
  int64_t size = 0;                                  // examples per forward pass per process
  int64_t accumulation = 0;                          // micro-batches per optimizer step per process
  bool automatic = false;                            // chosen by auto
  std::string reason;                                // for people: why this size
  std::vector<api::MicroBatchCandidate> candidates;  // auto: each size considered, largest first
  api::MicroBatchReport to_report() const;
};

// The per-process share of the global batch; throws ConfigError naming training.globalBatchSize
// when the processes cannot share it evenly.
int64_t examples_per_process(int64_t global_batch, int world);

// training.microBatchSize auto: the largest divisor of the per-process share of `global_batch`
// whose estimated peak fits kAutoMemoryFraction of `gpu_memory_bytes`; 1 when none does (the
// preflight then says DoesNotFit). Without a GPU to fit (a CPU run, or a preflight that knows no
// GPU memory) the whole share, with no accumulation.
MicroBatchChoice choose_micro_batch(const model::ModelConfig& model, const TrainConfig& config,
                                    int world, int64_t global_batch,
                                    std::optional<int64_t> gpu_memory_bytes);

// A configured size as a choice (with its accumulation), or auto resolved by choose_micro_batch;
// either way training.microBatchSize of `config` is a number afterwards.
MicroBatchChoice resolve_micro_batch(TrainConfig& config, const model::ModelConfig& model,
                                     int world, int64_t global_batch,
                                     std::optional<int64_t> gpu_memory_bytes);

// After a step ran out of memory at `current`: the largest divisor of `per_process` that is at
// most half of it, so the global batch stays the same; 0 when `current` is already 1.
int64_t smaller_micro_batch(int64_t per_process, int64_t current);

}  // namespace kubetune::train
