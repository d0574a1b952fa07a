// Loading what a run needs: the model (with LoRA when asked), its tokenizer and chat template,
// and turning data micro-batches into tensors on the right device.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/train_config.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "trainer/data/batch.h"
#include "trainer/data/dataset.h"
#include "trainer/model/causal_lm.h"
#include "trainer/model/lora.h"
#include "trainer/model/named_params.h"

namespace kubetune::train {

struct TextTools {
  text::Tokenizer tokenizer;
  std::unique_ptr<text::ChatTemplate> chat;  // null when the model folder has no chat template
  int32_t pad_id = 0;
};
TextTools load_text_tools(const std::string& model_dir);

// The data section of the config as the dataset loader takes it.
data::DatasetOptions dataset_options(const TrainConfig& c);

// Throws when `config` (read from `model_dir`) is a bitsandbytes 4-bit checkpoint and the method
// is not qlora: its weights exist only in 4 bits.
void check_weights_fit_method(const model::ModelConfig& config, const std::string& model_dir,
                              bool qlora);

// Loads an HF folder onto `device`. Frozen weights are stored in `frozen_dtype`; trainable ones
// (LoRA adapters, or everything for full fine-tuning) stay fp32 master weights.
// With `quantization` (qlora), the decoder's linear weights are stored in 4 bits, each layer
// quantized as soon as it is loaded. With init kRandom no weights are read: they are drawn as
// transformers' from_config draws them, on `device` from its default generator.
// `after_part(prefix, part)`, when given, sees each part once it holds its weights (and 4-bit
// form), before the next part loads and before LoRA's adapters exist: sharding full splits it
// there (parallel/full_sharding.h).
using PartLoaded = std::function<void(const std::string& prefix, torch::nn::Module& part)>;
model::CausalLM load_model(const std::string& model_dir, const torch::Device& device,
                           torch::Dtype frozen_dtype, const std::optional<model::LoraConfig>& lora,
                           bool full_finetune, uint64_t seed,
                           const std::optional<api::Quantization>& quantization = std::nullopt,
                           api::ModelInit init = api::ModelInit::kPretrained,
                           const PartLoaded& after_part = {});

using model::NamedParams;
NamedParams trainable_parameters(model::CausalLMImpl& model);

struct BatchTensors {
  torch::Tensor input_ids, position_ids, segment_ids;  // segment_ids undefined: plain causal
  torch::Tensor labels;  // stays on the host: the loss picks its target rows there
};
BatchTensors to_tensors(const data::MicroBatch& batch, const torch::Device& device);

}  // namespace kubetune::train
