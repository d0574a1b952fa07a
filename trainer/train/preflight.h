// `kubetune-trainer preflight`: everything that can be known before a GPU is held. It reads the
// model's config.json (not its weights) and the whole dataset on the CPU, and reports the model,
// the data (records, tokens, targets, every invalid line, truncated lines), the steps, and an
// estimate of each GPU's peak memory. A job whose data is invalid or that does not fit fails
// here, in seconds, instead of hours into a run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

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
  int64_t total() const;
  api::MemoryReport to_report() const;  // in GiB, for the preflight report
};

// Trainable parameters of the method: all of them (full) or the LoRA adapters' A and B.
int64_t trainable_parameters(const model::ModelConfig& model, const TrainConfig& config);

// Our trainer's storage rules (model_setup.cpp, adamw.cpp, weight_shards.cpp) with an activation
// cost per token and layer fitted to peaks measured on H100/H200 (bench/README.md, "Memory").
MemoryEstimate estimate_gpu_memory(const model::ModelConfig& model, const TrainConfig& config,
                                   int world_size);

struct PreflightOptions {
  int world_size = 1;                    // processes (pods x GPUs per pod)
  std::optional<double> gpu_memory_gib;  // the GPU's memory; unset: not checked
  int invalid_lines_listed = 20;         // the report lists this many, counts all
};

struct PreflightReport {
  api::PreflightReport report;
  // nullopt when the job can start; else DatasetInvalid or DoesNotFit.
  std::optional<api::PreflightVerdict> verdict;
};

// The report cut down to at most `max_bytes` of JSON: lists of lines shortened, long messages cut,
// then the details dropped, never the verdict or the message's start. For a pod's termination
// message, which Kubernetes truncates blindly (a cut JSON would not parse).
std::string compact_report(const nlohmann::json& report, size_t max_bytes);

// Throws UserInputError for problems that stop the reading itself (missing model folder,
// unreadable file, unsupported architecture).
PreflightReport preflight(const TrainConfig& config, const PreflightOptions& options);

}  // namespace kubetune::train
