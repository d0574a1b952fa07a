// The training part of a FineTuneJob: the document `kubetune-trainer train --config` reads and the
// `spec` fields of the FineTuneJob custom resource (everything but workers/runPolicy/volumes).
//
// It is defined once, in the FineTuneJob's OpenAPI v3 schema (common/finetunejob_schema.json). The
// same schema fills in defaults and validates a user's file here, and makes the CRD, so the
// trainer, the operator and the API server never disagree about a field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/finetunejob_types.h"  // generated from the schema

namespace kubetune {

// Thrown for a config the user got wrong. what() lists every problem, one per line, each starting
// with the JSON path of the field ("training.learningRate: must be > 0").
class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(const std::vector<std::string>& problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// The whole FineTuneJob schema: {"spec": ..., "status": ...}. Properties of spec that belong to
// the operator (workers, runPolicy, volumes) carry "x-kubetune-operator": true.
const nlohmann::json& finetunejob_schema();

// The training config: the FineTuneJob's spec without the operator's properties.
const nlohmann::json& train_config_schema();

// The names of the operator's properties of spec.
const std::vector<std::string>& operator_spec_fields();

// Applies the schema's defaults and checks types, enums, ranges and unknown keys; throws
// ConfigError.
nlohmann::json validate_train_config(nlohmann::json config);

// The training config is the generated api::TrainConfig: every field is declared once, in the
// schema, with its default (common/codegen). What the schema cannot say is computed here.
using api::TrainConfig;

// Reads a config that validate_train_config accepted.
TrainConfig parse_train_config(const nlohmann::json& validated);

// lora and qlora train adapters on frozen base weights; full trains every weight.
inline bool trains_adapters(const TrainConfig& c) {
  return c.method.type == api::MethodType::kLora || c.method.type == api::MethodType::kQlora;
}

// Whether decoder layers are recomputed in backward: model.offloadCheckpoints implies it.
inline bool recomputes_layers(const TrainConfig& c) {
  return c.model.gradient_checkpointing || c.model.offload_checkpoints;
}

// training.microBatchSize is a number of examples, or "auto" until the trainer chooses one from
// the GPU's memory (trainer/plan/micro_batch.h); auto needs training.globalBatchSize, which
// parse_train_config checks.
bool micro_batch_is_auto(const TrainConfig& c);
// Sequences a micro-batch row of training.microBatchSize stands for: 2 under a pair objective (the
// prompt with the chosen answer, and with the rejected one), else 1 (kto scores its KL sequences
// in a forward of their own, without gradients).
int64_t sequences_per_example(const TrainConfig& c);
// The refusal of auto without a global batch, by the trainer and by the CRD's rule.
inline constexpr const char* kAutoMicroBatchNeedsGlobalBatch =
    "training.microBatchSize auto chooses how training.globalBatchSize splits into micro-batches: "
    "set training.globalBatchSize";
// The refusals of model.precision fp8, by the trainer and by the CRD's rules: its FP8 products
// take bf16 inputs and give bf16 outputs, and lora's FP8 base weights are not split by sharding.
inline constexpr const char* kFp8NeedsBf16 =
    "model.precision fp8 computes in bfloat16 around its FP8 products: model.dtype float32 cannot "
    "take it; use model.dtype auto or bfloat16";
inline constexpr const char* kFp8LoraBaseNotSharded =
    "model.precision fp8 keeps lora's frozen base weights in FP8, which distributed.sharding full "
    "does not split: use distributed.sharding optimizer, or method.type full";
// The refusal of output.gguf without a model folder to convert, by the trainer and the CRD's rule.
inline constexpr const char* kGgufNeedsAModelFolder =
    "output.gguf is made from a model folder: for lora and qlora set output.saveMerged (the GGUF "
    "files are converted from <output.dir>/merged)";
// The number; throws std::logic_error while it is still "auto" (a bug: resolve it first).
int64_t micro_batch_size(const TrainConfig& c);
void set_micro_batch_size(TrainConfig& c, int64_t examples);

// method.lora.targetModules, or none when it holds "all-linear": the trainer then adapts every
// linear layer of the decoder layers, under the names the model's family gives them.
std::vector<std::string> lora_target_modules(const api::Lora& lora);

// checkpoint.dir, or <output.dir>/checkpoints when it is not set.
std::string checkpoint_dir(const TrainConfig& c);

// Loads, validates and parses a config file: the one call the trainer's `train` command makes.
TrainConfig load_train_config(const std::string& path);

}  // namespace kubetune
