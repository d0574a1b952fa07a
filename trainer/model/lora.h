// PEFT-compatible LoRA: the same parameter names, initialisation and scaling as peft's LoraModel,
// so adapters move freely between kubetune and Hugging Face PEFT.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/causal_lm.h"

namespace kubetune::model {

struct LoraConfig {
  int r = 16;
  double alpha = 32;
  double dropout = 0;
  // PEFT-style: "q_proj" or a dotted suffix of a module name ("model.layers.1.mlp.up_proj");
  // empty = all linear layers.
  std::vector<std::string> target_modules;
  bool use_rslora = false;
  double scaling() const;  // alpha / r, or alpha / sqrt(r) with rslora
};

// PEFT's rule: `target` names `module` ("model.layers.1.self_attn.q_proj") when it equals it or
// is a suffix of it after a dot ("q_proj", "self_attn.q_proj").
bool matches_target(const std::string& module, const std::string& target);

// The linear layers of the config's decoder layers by their last name (PEFT's "all-linear" minus
// lm_head): q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, or Phi-3's qkv_proj o_proj
// gate_up_proj down_proj.
std::vector<std::string> all_linear_targets(const ModelConfig& config);

// Throws std::runtime_error naming a target that is no linear layer of the config's family (and
// the names it has); empty targets mean all of them.
void check_lora_targets(const ModelConfig& config, const std::vector<std::string>& targets);

// Adds lora_A [r,in] (kaiming_uniform a=sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), drawn from a
// generator seeded with `seed`) and lora_B [out,r] (zeros) to every targeted linear layer, in
// fp32 on the base weight's device, and freezes every base parameter.
// Throws std::runtime_error for unknown target names, r <= 0, or an already adapted model.
void apply_lora(CausalLM& model, const LoraConfig& cfg, uint64_t seed);

// Folds B A * scaling into the base weights and removes the adapters.
void merge_lora(CausalLM& model);

bool has_lora(CausalLM& model);

// QLoRA: every linear layer inside `part` (a decoder layer: the LM head stays as it is) stored in
// 4 bits on its device, as PEFT+bitsandbytes quantize them; LoRA adapters stay as they are.
// Returns the bytes the quantized weights take.
int64_t quantize_linears(torch::nn::Module& part, const std::string& type, int64_t blocksize,
                         bool double_quant, torch::ScalarType compute_dtype);

// model.precision fp8: every linear layer inside `part` (a decoder layer) takes its base product
// in FP8 (LinearImpl::use_fp8), frozen bases kept transposed too, by input-gradient group
// (keep_fp8_transposed). Returns how many do; a shape FP8 cannot take stays as it is.
int64_t use_fp8_products(torch::nn::Module& part);

}  // namespace kubetune::model
