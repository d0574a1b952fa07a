// The architecture of a decoder-only model, read from a Hugging Face config.json: its family
// (family.h) and the sizes and options of this checkpoint.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainer/model/family.h"

namespace kubetune::model {

// Rotary position embeddings: the base and how the frequencies are rescaled for long context
// ("rope_scaling" and "rope_theta" in transformers 4, "rope_parameters" in transformers 5).
// Supported types: default, linear, dynamic, llama3, longrope, yarn.
struct Rope {
  std::string type = "default";
  double theta = 10000;
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
  // longrope: per-frequency divisors below and above original_max_position_embeddings, and the
  // factor cos and sin are multiplied by (1 for the other types).
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1;
  // Only the first partial_rotary_factor of each head is rotated (Phi-4-mini: 0.75).
  double partial_rotary_factor = 1;
  // yarn: the rotations that bound the ramp between interpolated and extrapolated frequencies,
  // and whether those bounds are rounded to whole dimensions (attention_factor as above).
  double beta_fast = 32, beta_slow = 1;
  bool truncate = true;
};

// A decoder linear layer by its name in the model ("self_attn.q_proj") and its shape; with
// `experts` > 0, a stack of that many experts' linears of that shape ("mlp.experts.gate_up_proj").
struct LinearShape {
  std::string module;
  int64_t in, out;
  bool bias;
  int64_t experts = 0;
  int64_t weights() const { return in * out * (experts > 0 ? experts : 1); }
};

struct ModelConfig {
  // Never null: Llama's in a config built by hand (tests), the config.json's once read.
  const Family* family = find_family("llama");
  std::string model_type;  // the family's, as in config.json
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0,
          num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0,
          max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  Rope rope;               // the full-attention layers' (every layer's, unless the family has two)
  Rope local_rope;         // the sliding-window layers' (equal to `rope` unless the family has two)
  bool gelu_tanh = false;  // the MLP's gate goes through tanh-approximated GELU instead of SiLU
  double attention_scale = 0;  // softmax scale: head_dim^-0.5 or query_pre_attn_scalar^-0.5
  // attention_bias: bias on q,k,v (and o unless the family's rule says otherwise).
  bool tie_word_embeddings = false, attention_bias = false, mlp_bias = false;
  // config.json's quantization_config says bitsandbytes 4-bit: the linear weights are stored as
  // bitsandbytes' Linear4bit saves them (method.type qlora trains on them as they are).
  bool bnb_4bit = false;
  double attention_dropout = 0;
  double initializer_range = 0.02;
  // Sliding-window attention (Mistral, Qwen2 with use_sliding_window): token i sees j only when
  // i - j < sliding_window. 0 = none. sliding_layers[l] says whether layer l uses the window.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // Mixture of experts (family->has_experts()): num_experts experts of width
  // expert_intermediate_size in each sparse layer, experts_per_token of them per token, their
  // weights renormalised when norm_topk_prob; sparse_layers[l] says whether layer l is sparse
  // (else it has the dense MLP of intermediate_size).
  int64_t num_experts = 0, experts_per_token = 0, expert_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::vector<bool> sparse_layers;
  // The router's load-balancing loss is added to the loss times this when config.json's
  // output_router_logits is true (router_aux_loss_coef); 0 otherwise.
  double router_aux_loss_coef = 0;
  // The clamped SwiGLU's gain and clamp (families with experts.clamped_swiglu: gpt-oss).
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;
  std::string torch_dtype = "float32";
  // The original config.json (written back on save). For the language model of a multimodal
  // checkpoint (Gemma3ForConditionalGeneration: wrapped_in_multimodal()) the whole of it, the
  // fields above being read from its text_config.
  nlohmann::json raw;
  std::string source_dir;  // the folder from_dir read; empty for a config built otherwise

  // Throws std::runtime_error naming `source_name` and the field for unknown architectures,
  // missing fields and unsupported options.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source_name);
  static ModelConfig from_dir(const std::string& dir);

  // This is the language model of a multimodal checkpoint, whose other parts (the vision tower,
  // the projector) kubetune carries from the source folder without training them.
  bool wrapped_in_multimodal() const { return raw.is_object() && raw.contains("text_config"); }
  bool o_proj_bias() const {
    return attention_bias && family->attention_bias != AttentionBias::kQkvOnly;
  }
  int64_t window_for_layer(int64_t layer) const;  // 0 when the layer attends to the full prefix
  const Rope& rope_for_layer(int64_t layer) const;
  // The dimensions of each head `rope` rotates: head_dim, or its partial_rotary_factor.
  int64_t rotary_dim(const Rope& rope) const;
  bool is_sparse(int64_t layer) const {
    return layer < static_cast<int64_t>(sparse_layers.size()) && sparse_layers[layer];
  }
  // The linear layers of decoder layer `layer` by their names in the model (q_proj, ... or the
  // fused qkv_proj and gate_up_proj; a sparse layer's expert stacks), in forward order. The
  // router is not among them: it is never adapted.
  std::vector<LinearShape> decoder_linears(int64_t layer = 0) const;
  int64_t num_parameters() const;
  int64_t parameters_of_layer(int64_t layer) const;
  // The largest decoder layer's parameters (a sparse one's when any is).
  int64_t largest_layer_parameters() const;
  // The parameters one token is computed with: all but the experts it is not routed to.
  int64_t active_parameters() const;
};

}  // namespace kubetune::model
