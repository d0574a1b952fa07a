#include "trainer/train/model_setup.h"

#include <torch/torch.h>

#include <filesystem>

#include "common/log.h"
#include "trainer/io/hf_checkpoint.h"
#include "trainer/model/device_copy.h"
#include "trainer/train/device.h"

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
  return o;
}

void check_checkpoint_fits_method(const model::ModelConfig& config, const std::string& model_dir,
                                  bool qlora) {
  if (config.bnb_4bit && !qlora) {
    throw std::runtime_error(model_dir +
                             "/config.json: a bitsandbytes 4-bit checkpoint (quantization_config) "
                             "trains only with method.type qlora");
  }
}

model::CausalLM load_model(const std::string& model_dir, const torch::Device& device,
                           torch::Dtype frozen_dtype, const std::optional<model::LoraConfig>& lora,
                           bool full_finetune, uint64_t seed,
                           const std::optional<api::Quantization>& quantization) {
  auto config = model::ModelConfig::from_dir(model_dir);
  check_checkpoint_fits_method(config, model_dir, quantization.has_value());
  model::CausalLM model(config);
  io::load_hf_weights(model, model_dir);
  if (lora) model::apply_lora(model, *lora, seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) {
    const bool trainable = full_finetune || p.requires_grad();
    p.set_data(p.detach().to(device, trainable ? torch::kFloat32 : frozen_dtype));
    p.set_requires_grad(trainable);
  }
  for (auto& b : model->buffers()) b.set_data(b.to(device));
  if (quantization) {
    using api::QuantizationComputeDtype;
    const auto compute =
        quantization->compute_dtype == QuantizationComputeDtype::kFloat32   ? torch::kFloat32
        : quantization->compute_dtype == QuantizationComputeDtype::kFloat16 ? torch::kFloat16
                                                                            : torch::kBFloat16;
    const std::string type(api::to_string(quantization->type));
    const int64_t bytes = model::quantize_decoder_linears(model, type, quantization->block_size,
                                                          quantization->double_quant, compute);
    log::info() << "qlora: decoder linear weights in " << type
                << (quantization->double_quant ? " with double quantization" : "") << ", blocks of "
                << quantization->block_size << ": " << bytes / kGiB << " GiB on " << device.str();
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
