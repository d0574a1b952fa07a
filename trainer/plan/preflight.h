// `kubetune-trainer preflight`: everything that can be known before a GPU is held. It reads the
// model's config.json (not its weights) and the whole dataset on the CPU, and reports the model,
// the data (records, tokens, targets, every invalid line, truncated lines), the steps, and an
// estimate of each GPU's peak memory (memory_model.h). A job whose data is invalid or that does not
// fit fails here, in seconds, instead of hours into a run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/train_config.h"
#include "trainer/model/model_config.h"
#include "trainer/plan/memory_model.h"

namespace kubetune::train {

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
