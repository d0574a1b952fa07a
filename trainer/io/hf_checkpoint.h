// Hugging Face model folders: config.json + model.safetensors (or sharded with an index).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "trainer/model/causal_lm.h"

namespace kubetune::io {

class CheckpointReader;

// A Hugging Face folder's weights, read into a model one part at a time (train::load_model): the
// folder, config.json and the safetensors files (or the index) are checked on construction.
class HfWeights {
 public:
  explicit HfWeights(const std::string& dir);
  ~HfWeights();
  HfWeights(const HfWeights&) = delete;
  HfWeights& operator=(const HfWeights&) = delete;

  // Loads every base parameter of `part`, whose checkpoint names are `prefix` + "." + its own
  // (prefix "" for the whole model), as load_hf_weights does.
  void load_into(torch::nn::Module& part, const std::string& prefix);

 private:
  std::unique_ptr<CheckpointReader> reader_;
  model::ModelConfig config_;  // where each parameter is stored (model/checkpoint_names.h)
};

// Loads every base parameter of `model` from `dir`/model.safetensors or from the shards named
// by `dir`/model.safetensors.index.json, converting to each parameter's dtype and device. A tied
// lm_head is not read; LoRA parameters are skipped. Throws std::runtime_error naming the file and
// tensor for: a missing folder or config.json, missing/truncated files, a tensor listed in the
// index but absent from its shard, a parameter missing from the checkpoint, a shape mismatch.
void load_hf_weights(model::CausalLM& model, const std::string& dir);

// Writes config.json (the original config with its dtype updated) and the weights in `dtype`:
// model.safetensors, or model-0000i-of-0000N.safetensors + model.safetensors.index.json once
// they exceed `max_shard_bytes`. Throws if the model still carries LoRA adapters: merge first.
// `value_of(name, parameter)`, when given, says what to write for a parameter whose values live
// elsewhere (fully sharded weights, gathered layer by layer); it is called once per parameter, in
// the model's order, when the file reaches it, so no more than a tensor is in host memory at once.
// With `write` false nothing is written and `value_of` is called all the same, in the same order:
// the processes that do not write take part in the gathers.
using ParameterValue = std::function<at::Tensor(const std::string& name, const at::Tensor& param)>;
void save_hf_model(model::CausalLM& model, const std::string& out_dir, c10::ScalarType dtype,
                   int64_t max_shard_bytes = 5'000'000'000, const ParameterValue& value_of = {},
                   bool write = true);

// Copies tokenizer.json, tokenizer_config.json, special_tokens_map.json, chat_template.jinja,
// generation_config.json (and tokenizer.model / vocab.json / merges.txt) when present.
void copy_tokenizer_files(const std::string& from_dir, const std::string& to_dir);

// "float32" | "bfloat16" | "float16" as written in config.json.
std::string hf_dtype_name(c10::ScalarType dtype);
// The dtype a config.json names (torch_dtype or dtype): float32 and float16 as named, anything
// else (bfloat16, an FP8 checkpoint's float8_*) bfloat16, the dtype a full model is served in.
c10::ScalarType hf_dtype(const std::string& name);

}  // namespace kubetune::io
