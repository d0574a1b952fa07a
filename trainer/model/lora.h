// PEFT-compatible LoRA: the same parameter names, initialisation and scaling as peft's LoraModel,
// so adapters move freely between kubetune and Hugging Face PEFT.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
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
  // PEFT's target_parameters ("mlp.experts.gate_up_proj"), from an adapter PEFT wrote: when set,
  // a mixture of experts' stacks are adapted where these name them, and target_modules name
  // linear layers only (an empty one none). Unset (kubetune's manifests), target_modules name
  // both.
  std::optional<std::vector<std::string>> target_parameters;
  bool use_rslora = false;
  // PEFT's rank_pattern and alpha_pattern, by a module's last name ("gate_up_proj"): what peft
  // writes when it maps a mixture of experts' gate_proj and up_proj targets onto the fused
  // experts.gate_up_proj (twice the rank and alpha).
  std::map<std::string, int> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  double scaling() const;  // alpha / r, or alpha / sqrt(r) with rslora
  // The rank and scaling of the module named `module` (a full or last name).
  int rank_of(const std::string& module) const;
  double scaling_of(const std::string& module) const;
};

// PEFT's rule: `target` names `module` ("model.layers.1.self_attn.q_proj") when it equals it or
// is a suffix of it after a dot ("q_proj", "self_attn.q_proj").
bool matches_target(const std::string& module, const std::string& target);

// The linear layers of the config's decoder layers by their last name (PEFT's "all-linear" minus
// lm_head): q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, or Phi-3's qkv_proj o_proj
// gate_up_proj down_proj; in a mixture of experts the attention's and one expert's (q_proj k_proj
// v_proj o_proj gate_proj up_proj down_proj, Mixtral's w1 w3 w2: resolved_for says what they
// adapt, as Unsloth's defaults do; PEFT's all-linear leaves the experts out). The router is never
// a target.
std::vector<std::string> all_linear_targets(const ModelConfig& config);

// The targets as PEFT's target_modules and target_parameters take them. For a mixture of experts
// (unless `cfg` came from PEFT already) the MLP's names name the experts' stacks, as PEFT 0.21
// maps them for a transformers-5 model: gate and up (Mixtral's w1 and w3) together name
// experts.gate_up_proj, adapted at twice the rank and alpha so that each keeps r and alpha / r,
// and down (w2) names experts.down_proj. A dense layer's MLP among sparse ones (Qwen3-MoE's
// mlp_only_layers) is then never adapted: PEFT cannot name it apart from the experts. Throws
// std::runtime_error for gate without up or up without gate.
LoraConfig resolved_for(const LoraConfig& cfg, const ModelConfig& config);

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

// The name PEFT saves one of our LoRA tensors under (without "base_model.model."): ours, except
// for an expert stack's factors (experts.h: ExpertLora), which PEFT's target_parameters names by
// the experts module ("model.layers.0.mlp.experts.lora_A.weight", and ".base_layer." for
// gate_up_proj when down_proj is adapted too).
std::string peft_tensor_name(CausalLM& model, const std::string& name);

// The expert stacks that carry adapters, as PEFT's target_parameters name them
// ("mlp.experts.down_proj", "mlp.experts.gate_up_proj"), sorted; empty for a dense model.
std::vector<std::string> adapted_expert_stacks(CausalLM& model);

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
