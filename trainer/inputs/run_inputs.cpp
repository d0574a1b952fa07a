#include "trainer/inputs/run_inputs.h"

#include <torch/torch.h>

#include <filesystem>

#include "common/log.h"
#include "trainer/device/device.h"
#include "trainer/io/hf_checkpoint.h"
#include "trainer/model/device_copy.h"

namespace kubetune::train {

TextTools load_text_tools(const std::string& model_dir) {
  TextTools t{text::Tokenizer::from_dir(model_dir), nullptr, 0};
  try {
    t.chat = std::make_unique<text::ChatTemplate>(text::ChatTemplate::from_dir(model_dir));
  } catch (const std::exception&) {
    t.chat = nullptr;  // only messages-format data needs one; the loader says so if it is missing
  }
  // Padding positions are masked everywhere, so any valid id works when the model defines none.
  t.pad_id = t.tokenizer.pad_id().value_or(t.tokenizer.eos_id().value_or(0));
  return t;
}

data::DatasetOptions dataset_options(const TrainConfig& c) {
  data::DatasetOptions o;
  o.format = c.data.format;
  o.loss_on = c.data.loss_on;
  o.max_length = c.data.max_length;
  o.columns = c.data.columns;
  if (c.training.objective == api::TrainingObjective::kKto)
    o.preference = data::Format::kUnpairedPreference;
  else if (c.training.objective != api::TrainingObjective::kSft)
    o.preference = data::Format::kPreference;
  return o;
}

void check_weights_fit_method(const model::ModelConfig& config, const std::string& model_dir,
                              bool qlora) {
  if (config.bnb_4bit && !qlora) {
    throw std::runtime_error(model_dir +
                             "/config.json: a bitsandbytes 4-bit checkpoint (quantization_config) "
                             "trains only with method.type qlora");
  }
}

namespace {

torch::Dtype compute_dtype_of(const api::Quantization& q) {
  using api::QuantizationComputeDtype;
  return q.compute_dtype == QuantizationComputeDtype::kFloat32   ? torch::kFloat32
         : q.compute_dtype == QuantizationComputeDtype::kFloat16 ? torch::kFloat16
                                                                 : torch::kBFloat16;
}

}  // namespace

model::CausalLM load_model(const std::string& model_dir, const torch::Device& device,
                           torch::Dtype frozen_dtype, const std::optional<model::LoraConfig>& lora,
                           bool full_finetune, uint64_t seed,
                           const std::optional<api::Quantization>& quantization,
                           api::ModelInit init, const PartLoaded& after_part) {
  auto config = model::ModelConfig::from_dir(model_dir);
  check_weights_fit_method(config, model_dir, quantization.has_value());
  // The model is built without memory, then each part (embedding, decoder layer, ...) gets its
  // storage on the device, its weights and, for QLoRA, its 4-bit form before the next part is
  // touched: neither host nor device ever holds more than one layer in full precision beyond
  // what the model keeps, so a model whose 4-bit form fits trains even when its bf16 one would not.
  model::CausalLM model(config, torch::TensorOptions().device(torch::kMeta));
  std::optional<io::HfWeights> weights;
  if (init == api::ModelInit::kPretrained) weights.emplace(model_dir);
  // Trainable weights (everything, for full fine-tuning) are fp32 master weights.
  const auto stored =
      torch::TensorOptions().device(device).dtype(full_finetune ? torch::kFloat32 : frozen_dtype);
  int64_t quantized_bytes = 0;
  torch::NoGradGuard no_grad;
  for (auto& [prefix, part] : model->parts()) {
    for (auto& p : part->parameters()) p.set_data(torch::empty(p.sizes(), stored));
    if (weights)
      weights->load_into(*part, prefix);
    else
      model::init_like_hf(*part, config.initializer_range);
    // QLoRA quantizes the decoder layers' linears; the LM head stays as it is.
    if (quantization && std::dynamic_pointer_cast<model::DecoderLayerImpl>(part)) {
      quantized_bytes += model::quantize_linears(
          *part, std::string(api::to_string(quantization->type)), quantization->block_size,
          quantization->double_quant, compute_dtype_of(*quantization));
    }
    if (after_part) after_part(prefix, *part);
  }
  for (auto& b : model->buffers()) b.set_data(b.to(device));
  for (auto& p : model->parameters()) p.set_requires_grad(full_finetune);
  if (lora) model::apply_lora(model, *lora, seed);  // fp32 adapters, on the weights' device
  if (quantization) {
    log::info() << "qlora: decoder linear weights in " << api::to_string(quantization->type)
                << (quantization->double_quant ? " with double quantization" : "") << ", blocks of "
                << quantization->block_size << ": " << quantized_bytes / kGiB << " GiB on "
                << device.str();
  }
  return model;
}

NamedParams trainable_parameters(model::CausalLMImpl& model) {
  NamedParams out;
  for (const auto& item : model.named_parameters()) {
    if (!item.value().requires_grad()) continue;
    out.names.push_back(item.key());
    out.tensors.push_back(item.value());
  }
  return out;
}

BatchTensors to_tensors(const data::MicroBatch& batch, const torch::Device& device) {
  auto host = [&](const std::vector<int64_t>& values) {
    return torch::from_blob(const_cast<int64_t*>(values.data()), {batch.batch, batch.length},
                            torch::kInt64)
        .clone();  // never alias `values`
  };
  auto on_device = [&](const std::vector<int64_t>& values) {
    return model::to_device_async(host(values), device);
  };
  BatchTensors t;
  t.input_ids = on_device(batch.input_ids);
  t.position_ids = on_device(batch.position_ids);
  t.labels = host(batch.labels);
  if (batch.has_padding_or_packing) t.segment_ids = on_device(batch.segment_ids);
  return t;
}

}  // namespace kubetune::train
