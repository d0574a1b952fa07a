// PEFT LoRA adapter folders: adapter_config.json + adapter_model.safetensors, loadable with
// peft.PeftModel.from_pretrained and produced by peft's save_pretrained.
#pragma once

#include <string>

#include "trainer/model/causal_lm.h"
#include "trainer/model/lora.h"

namespace kubetune::io {

// Writes adapter_config.json and adapter_model.safetensors (tensors named
// base_model.model.<our name>, e.g.
// base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight).
void save_peft_adapter(model::CausalLM& model, const model::LoraConfig& cfg,
                       const std::string& base_model_name_or_path, const std::string& out_dir);

// Reads adapter_config.json, applies LoRA with it and loads the adapter weights. Throws
// std::runtime_error naming the file and field for unsupported options (DoRA, fan_in_fan_out,
// bias, rank/alpha patterns, modules_to_save, layers_to_transform) or missing/mismatched tensors.
model::LoraConfig load_peft_adapter(model::CausalLM& model, const std::string& dir);

}  // namespace kubetune::io
