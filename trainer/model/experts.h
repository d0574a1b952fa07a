// A mixture-of-experts layer (Qwen3-MoE, Mixtral: family.h, ExpertLayout): a router picks
// experts_per_token of num_experts gated MLPs for each token and weighs their outputs.
//
// Names are transformers 5's: the layer's `mlp` holds `gate.weight` (the router, [E, hidden])
// and `experts.gate_up_proj` [E, 2I, hidden] and `experts.down_proj` [E, hidden, I], each a stack
// of one linear weight per expert (checkpoint_names.h maps them to the Hub's per-expert tensors).
// The experts run as grouped products over the tokens sorted by expert, not as a loop over
// experts: on a GPU LibTorch's grouped GEMM (at::_grouped_mm); on the CPU, and for shapes or
// dtypes that GEMM cannot take, one product per expert, which is also the GPU test's reference.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <string>

#include "kernels/quant4.h"
#include "trainer/model/layers.h"
#include "trainer/model/model_config.h"

namespace kubetune::model {

// x [S, in], rows sorted by expert; `ends` [E] int32 on x's device: expert e's rows are
// [ends[e-1], ends[e]) (an expert with no row has an empty range). w [E, out, in]. Returns
// [S, out]: each row times its expert's weight, differentiable in x and w. `grouped` false
// takes one product per expert whatever the device (the reference).
torch::Tensor grouped_linear(const torch::Tensor& x, const torch::Tensor& w,
                             const torch::Tensor& ends, bool grouped = true);

// The same with a frozen stack stored in 4 bits ([E * out, in] quantized as one matrix), made
// whole in `compute_dtype` in forward and again in backward, never kept between them.
torch::Tensor grouped_linear_4bit(const torch::Tensor& x, const kernels::Quant4State& w,
                                  int64_t experts, torch::ScalarType compute_dtype,
                                  const torch::Tensor& ends);

// LoRA on one expert stack as PEFT's ParamWrapper lays it out (target_parameters): A [r*E, in],
// rows e*r .. e*r+r-1 expert e's; B [out, r*E], columns i*E + e expert e's i-th.
class ExpertLoraImpl : public torch::nn::Module {
 public:
  ExpertLoraImpl(torch::Tensor a, torch::Tensor b, double scaling) : scaling(scaling) {
    lora_A = register_module("lora_A", LoraWeight(std::move(a)));
    lora_B = register_module("lora_B", LoraWeight(std::move(b)));
  }
  // A as [E, r, in] and B times `scale` as [E, out, r] (grouped_linear's weight layout), in
  // `dtype`.
  torch::Tensor a_stack(int64_t experts, torch::ScalarType dtype) const;
  torch::Tensor b_stack(int64_t experts, torch::ScalarType dtype, double scale) const;
  LoraWeight lora_A{nullptr}, lora_B{nullptr};
  double scaling;
};
TORCH_MODULE(ExpertLora);

// The experts of one sparse layer (transformers' Qwen3MoeExperts, MixtralExperts).
class ExpertsImpl : public torch::nn::Module {
 public:
  ExpertsImpl(const ModelConfig& c, const torch::TensorOptions& opts);
  // x [N, hidden]; top_k_index [N, k] int64 and top_k_weights [N, k]: each token's experts and
  // their weights. Returns [N, hidden] in x's dtype.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& top_k_index,
                        const torch::Tensor& top_k_weights);

  // LoRA on "gate_up_proj" or "down_proj" (a [r, in] per expert from A, zero B).
  void add_lora(const std::string& stack, torch::Tensor a, torch::Tensor b, double scaling);
  bool has_lora() const { return gate_up_lora || down_lora; }
  void merge_lora();  // W_e += B_e A_e * scaling, in fp32, then the adapters are removed
  // QLoRA: both stacks stored in 4 bits (bitsandbytes' format over [E * out, in]).
  int64_t quantize_4bit(const std::string& type, int64_t blocksize, bool double_quant,
                        torch::ScalarType compute_dtype);
  bool is_quantized() const { return gate_up_4bit_.packed.defined(); }
  // The two stacks' 4-bit states, named "gate_up_proj" and "down_proj" (QLoRA only).
  std::vector<std::pair<std::string, const kernels::Quant4State*>> quantized_states() const {
    return {{"gate_up_proj", &gate_up_4bit_}, {"down_proj", &down_4bit_}};
  }
  // The [E, out, in] shape of "gate_up_proj" or "down_proj", quantized or not.
  std::vector<int64_t> shape_of(const std::string& stack) const;

  torch::Tensor gate_up_proj, down_proj;                 // [E, 2I, hidden], [E, hidden, I]
  torch::Tensor gate_up_proj_bias, down_proj_bias;       // [E, 2I], [E, hidden]; gpt-oss only
  ExpertLora gate_up_lora{nullptr}, down_lora{nullptr};  // null unless adapted

 private:
  // rows [S, in] (sorted by expert) through one stack and its adapter.
  torch::Tensor product(const torch::Tensor& rows, const torch::Tensor& weight,
                        const kernels::Quant4State& quantized, const ExpertLora& lora,
                        const torch::Tensor& ends);
  // The gated activation of gate_up's rows as the family computes it (family.h: ExpertLayout).
  torch::Tensor activation(const torch::Tensor& gate_up) const;
  int64_t experts_;
  bool gelu_tanh_, interleaved_, clamped_;
  double alpha_, limit_;
  kernels::Quant4State gate_up_4bit_, down_4bit_;
  torch::ScalarType compute_dtype_ = torch::kBFloat16;
};
TORCH_MODULE(Experts);

// The router (transformers' Qwen3MoeTopKRouter, MixtralTopKRouter): logits = x W^T, softmax in
// fp32, the top k, renormalised when the config says so; gpt-oss's (GptOssTopKRouter) adds a bias
// and takes the softmax over the top k logits alone.
class RouterImpl : public torch::nn::Module {
 public:
  RouterImpl(const ModelConfig& c, const torch::TensorOptions& opts);
  struct Routing {
    torch::Tensor logits;   // [N, E] in x's dtype
    torch::Tensor probs;    // [N, E] fp32 softmax
    torch::Tensor weights;  // [N, k]: fp32, or x's dtype where the family casts them
    torch::Tensor experts;  // [N, k] int64
  };
  Routing forward(const torch::Tensor& x);
  torch::Tensor weight;  // [E, hidden]
  torch::Tensor bias;    // [E], in families with experts.router_bias

 private:
  int64_t top_k_;
  bool normalize_, weights_in_hidden_dtype_, softmax_over_top_k_;
};
TORCH_MODULE(Router);

// What one forward's routing did, for the router's load-balancing loss and the per-expert token
// counts; filled by each sparse layer while `open` (CausalLMImpl::hidden_states opens it for its
// own forward, so a layer recomputed during backward adds nothing).
//
// transformers' load_balancing_loss_func is num_experts x sum over experts of (the share of
// top-k assignments, no gradient) x (the mean router probability), both over every sparse layer
// and real token. The shares are constants once the forward is done, so the loss is a sum of one
// term per layer, each linear in that layer's probabilities: a layer recomputed in backward adds
// its own term's gradient there (causal_lm.cpp), and no layer keeps its [tokens, experts]
// probabilities for it.
struct RoutingRecord {
  bool open = false;
  double coefficient = 0;     // config's router_aux_loss_coef (0: no loss)
  double loss_weight = 0;     // what the caller multiplies the loss by (router_loss)
  torch::Tensor token_mask;   // [N] float: 1 for a real token, 0 for padding; or undefined
  torch::Tensor assignments;  // [E] float: real tokens routed to each expert, all layers
  // The same summed over every forward since the last CausalLMImpl::take_expert_tokens.
  torch::Tensor assignments_since_taken;
  torch::Tensor rows;                           // 0-dim float: real tokens times sparse layers
  std::vector<torch::Tensor> probability_sums;  // per sparse layer, [E]: its probabilities summed

  void start(const torch::Tensor& mask) {
    open = true;
    loss_weight = 0;
    token_mask = mask;
    assignments = rows = torch::Tensor();
    probability_sums.clear();
  }
  // loss_weight x coefficient x one layer's term of the load-balancing loss.
  torch::Tensor balance_term(const torch::Tensor& probability_sum) const;
};

// A sparse layer's MLP: router, then experts.
class SparseMoeImpl : public torch::nn::Module {
 public:
  SparseMoeImpl(const ModelConfig& c, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, hidden]
  Router gate{nullptr};
  Experts experts{nullptr};
  // Where each forward records its routing while the record is open (set by CausalLMImpl).
  std::shared_ptr<RoutingRecord> record;
  // The last forward's router probabilities summed over real tokens ([E], differentiable), when
  // the record asks for the load-balancing loss.
  torch::Tensor last_probability_sum;
};
TORCH_MODULE(SparseMoe);

}  // namespace kubetune::model
