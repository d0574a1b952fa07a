// A decoder-only causal language model of any family in family.h (LlamaForCausalLM,
// Qwen3ForCausalLM, Gemma3ForCausalLM, ...) whose parameter names equal the Hugging Face
// state_dict names.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/model/layers.h"
#include "trainer/model/model_config.h"

namespace kubetune::model {

// The "model." prefix of HF names: embed_tokens, layers.N, norm.
class DecoderStackImpl : public torch::nn::Module {
 public:
  DecoderStackImpl(const ModelConfig& c, const torch::TensorOptions& opts);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
};
TORCH_MODULE(DecoderStack);

class HostOffload;
struct RoutingRecord;

class CausalLMImpl : public torch::nn::Module {
 public:
  // Parameters are created with `opts` (CPU fp32 by default) and initialised like HF's
  // _init_weights (normal(0, initializer_range), zero biases, unit norms) from the global RNG.
  // With a meta device in `opts` they are shape-only placeholders (new_parameter), uninitialised,
  // to be given storage part by part (parts(), train::load_model).
  explicit CausalLMImpl(const ModelConfig& config, const torch::TensorOptions& opts = {});

  // The model's parts in forward order, each with the prefix of its parameters' Hugging Face
  // names: model.embed_tokens, model.layers.0 ... N-1, model.norm, and lm_head when untied.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> parts();

  // input_ids, position_ids: [B,T] int64. segment_ids undefined: plain causal attention; else
  // [B,T] int64 where token i attends to j iff j <= i && seg[i] == seg[j] && seg[j] != 0
  // (0 = padding). Returns the final-normed hidden states [B,T,hidden].
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                              const torch::Tensor& segment_ids = {});
  torch::Tensor logits(const torch::Tensor& hidden);  // lm_head, or the tied embedding
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& position_ids,
                        const torch::Tensor& segment_ids = {});

  // Mixture of experts: `weight` x config.json's router_aux_loss_coef x the router's
  // load-balancing loss of the last forward (0-dim fp32, differentiable), to add to the loss that
  // backward runs on, as transformers adds it (weight 1 there); undefined when the config asks
  // for none (output_router_logits false). Layers recomputed in backward add the gradient of
  // their part of it there, with the same weight.
  torch::Tensor router_loss(double weight);
  // What the last forward's routing did (experts.h): the real tokens sent to each expert over
  // all sparse layers. Null for dense families.
  const RoutingRecord* routing() const { return routing_.get(); }
  // The real tokens routed to each expert ([E] float, summed over sparse layers) since the last
  // call, on the model's device; undefined for a dense family or before any forward.
  torch::Tensor take_expert_tokens();

  // QLoRA's 4-bit base of the whole model (model::quantized_tensors below).
  std::vector<std::pair<std::string, torch::Tensor>> quantized_tensors();

  // The [vocab, hidden] matrix that maps hidden states to logits (tied: the embedding).
  torch::Tensor& output_weight();
  const ModelConfig& config() const { return config_; }
  // Recompute each decoder layer during backward instead of keeping its activations.
  void set_recompute_layers(bool on) { recompute_ = on; }
  bool recomputes_layers() const { return recompute_; }
  // With recompute on a GPU: the layer inputs kept for backward wait in pinned host memory
  // (HostOffload) instead of GPU memory.
  void set_recompute_offload(bool on);

  DecoderStack model{nullptr};
  Linear lm_head{nullptr};  // null when tie_word_embeddings

  // Called by hidden_states() before the weights of each stage are read: -1 before the
  // embedding, l before decoder layer l, num_hidden_layers before the final norm (and so before
  // the output layer). A sharded optimizer waits there for the weights still being gathered.
  std::function<void(int64_t stage)> before_stage;
  // Called by hidden_states() with each decoder layer's output, once the layer has run: fully
  // sharded weights (full_sharding.h) hook the layer's backward there.
  std::function<void(int64_t layer, const torch::Tensor& output)> after_layer;

 private:
  ModelConfig config_;
  // RoPE's inverse frequencies of the full-attention and the sliding-window layers (the same
  // unless the family has two), fp32, CPU; moved next to the inputs per call.
  torch::Tensor inv_freq_, local_inv_freq_;
  bool recompute_ = false;
  std::shared_ptr<HostOffload> offload_;    // null unless set_recompute_offload(true)
  std::shared_ptr<RoutingRecord> routing_;  // shared with the sparse layers; null when dense
};
TORCH_MODULE(CausalLM);

// QLoRA's 4-bit base in `module` (kernels/quant4.h: blocks, scales, the scales' scales), named
// "<module>.packed", ".absmax", ".nested_absmax" relative to it: frozen storage that is not a
// parameter, which fully sharded weights split like the rest (trainer/parallel/full_sharding.h).
std::vector<std::pair<std::string, torch::Tensor>> quantized_tensors(
    const torch::nn::Module& module);

// The weights in `module` that are read only as a product's operand, after rounding to the compute
// dtype (autocast's for the linear layers, the experts' own cast for their stacks): the linear
// layers' and the expert stacks' matrices; not norms or biases, some of which are applied in
// fp32. Fully sharded full fine-tuning gathers these in the compute dtype
// (trainer/parallel/full_sharding.h): the rounding a step does anyway, on half the bytes.
std::vector<torch::Tensor> product_operands(const torch::nn::Module& module);

// The attention mask for one forward pass: undefined (plain causal) when there are no segments
// and no window, else bool [B,1,T,T]. Padding tokens (segment 0) attend only to themselves so
// that no softmax row is empty (their outputs are never used).
torch::Tensor build_attention_mask(const torch::Tensor& segment_ids, int64_t batch, int64_t seq_len,
                                   int64_t sliding_window, const torch::Device& device);

}  // namespace kubetune::model
