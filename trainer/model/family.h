// What sets one decoder family apart from another, as data the model code reads.
//
// Every family kubetune trains is a stack of the same parts: an embedding, decoder layers of
// attention and a gated MLP between RMSNorms, a final norm and an output layer. Families differ
// in which of those parts they have and how a few of them compute, and each difference is a field
// below. A new family whose blocks are made of these parts is one entry of the table in
// family.cpp, with a tiny checkpoint of it in tests/model/make_fixtures.py; only a part the model
// code does not have yet needs code.
#pragma once

#include <string>
#include <vector>

namespace kubetune::model {

// How an RMSNorm applies its weight to the normalised x.
enum class NormWeight {
  kScale,         // w * x̂, x̂ cast to the input's dtype first (Llama)
  kOnePlusScale,  // (1 + w) * x̂ in fp32, then cast; w starts at 0 (Gemma)
  kScaleInFloat,  // w * x̂ in fp32, then cast (gpt-oss)
};

// Which attention projections carry a bias.
enum class AttentionBias {
  kNone,           // never (Mistral, Gemma 3, Phi-3)
  kConfigFlags,    // q, k, v and o when config.json's attention_bias, the MLP when mlp_bias (Llama)
  kQkvOnly,        // q, k and v always, o never (Qwen2)
  kAttentionFlag,  // q, k, v and o when attention_bias; the MLP never (Qwen3)
};

// Which layers attend through config.json's sliding_window.
enum class SlidingLayers {
  kNone,        // no layer (Llama)
  kEveryLayer,  // every layer when sliding_window is set (Mistral, Phi-3)
  // The layers layer_types marks "sliding_attention", or without layer_types those from
  // max_window_layers on, and only when use_sliding_window (Qwen2, Qwen3).
  kMarkedWhenEnabled,
  // The layers layer_types marks "sliding_attention", or without it all but every
  // sliding_window_pattern-th (by default the family's sliding_pattern: Gemma 3 has five local
  // layers to one global, gpt-oss alternates).
  kLayerTypes,
};

// Mixture-of-experts families: where a sparse layer's experts live in the checkpoint and how its
// router weighs them. In the model (transformers 5's layout) a sparse layer's `mlp` holds the
// router as `gate.weight` [E, hidden] and the experts as two stacks, `experts.gate_up_proj`
// [E, 2 x expert width, hidden] and `experts.down_proj` [E, hidden, expert width];
// checkpoints on the Hub store one tensor per expert and linear (trainer/model/checkpoint_names.h).
struct ExpertLayout {
  const char* block = nullptr;  // the sparse layer's module in the checkpoint; null: a dense family
  const char *gate = "gate_proj", *up = "up_proj", *down = "down_proj";  // one expert's linears
  const char* count_field = "num_experts";            // config.json's number of experts
  const char* width_field = "moe_intermediate_size";  // and one expert's width
  bool normalizes_always = false;  // top-k weights always renormalised (else norm_topk_prob)
  // The top-k weights are cast to the hidden states' dtype before they scale the experts'
  // outputs (Qwen3-MoE); Mixtral keeps them in fp32.
  bool weights_in_hidden_dtype = true;
  // decoder_sparse_step and mlp_only_layers choose which layers are sparse (Qwen3-MoE); without
  // them every layer is.
  bool sparse_step = false;
  const char* router = "gate";  // the router's module in the sparse layer ("router": gpt-oss)
  // gpt-oss: the router has a bias and takes the top k of its logits, then a softmax over those
  // k (the others take the softmax over all experts, then its top k).
  bool router_bias = false, softmax_over_top_k = false;
  // gpt-oss's experts: biases on both stacks (gate_up_proj_bias [E, 2I], down_proj_bias
  // [E, hidden]); gate_up's rows alternate gate and up (else all gate rows, then all up rows);
  // the clamped SwiGLU (up + 1) * g * sigmoid(alpha g), g = min(gate, limit), up clamped to
  // +-limit (config.json's swiglu_alpha, swiglu_limit); and each stack stored whole in the
  // checkpoint under the model's name, transposed ([E, in, out]), not one tensor per expert.
  bool biases = false, interleaved_gate_up = false, clamped_swiglu = false;
  bool stored_transposed = false;
};

struct Family {
  const char* model_type;    // config.json's "model_type"
  const char* architecture;  // config.json's "architectures" entry
  const char* display_name;  // for messages and the README's table
  AttentionBias attention_bias = AttentionBias::kNone;
  SlidingLayers sliding = SlidingLayers::kNone;
  NormWeight norm_weight = NormWeight::kScale;
  bool qk_norm = false;  // an RMSNorm over each head of q and of k, before RoPE (q_norm, k_norm)
  // Norms on the attention's and the MLP's outputs before each residual sum, and the MLP's own
  // input norm (post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm).
  bool sandwich_norms = false;
  bool fused_qkv = false;         // one qkv_proj whose rows are q, then k, then v
  bool fused_gate_up = false;     // one gate_up_proj whose rows are gate, then up
  bool scaled_embedding = false;  // embeddings times sqrt(hidden_size), rounded to their dtype
  // rope_parameters holds one entry per layer type ("full_attention", "sliding_attention").
  bool rope_per_layer_type = false;
  int sliding_pattern = 6;  // kLayerTypes without layer_types: every n-th layer is global
  // A learned logit per head (self_attn.sinks) joins each row's softmax and takes its share of
  // the weight, attending to nothing (gpt-oss).
  bool attention_sinks = false;
  // The attention's softmax scale is query_pre_attn_scalar^-0.5 instead of head_dim^-0.5.
  bool query_pre_attn_scalar = false;
  // Dropout fields other families lack, which kubetune refuses unless 0 (Phi-3's resid_pdrop and
  // embd_pdrop): dropout on the residual branches is not implemented.
  bool has_residual_dropout = false;
  const char* activation_field = "hidden_act";  // Gemma names it hidden_activation
  const char* default_activation = "silu";
  double default_rope_theta = 10000;
  double default_local_rope_theta = 10000;  // sliding layers' base, with rope_per_layer_type
  ExpertLayout experts = {};                // mixture-of-experts families only
  bool has_experts() const { return experts.block != nullptr; }
};

// The family of config.json's model_type, or null when kubetune has none.
const Family* find_family(const std::string& model_type);
// The family whose architecture is `architecture`, or null.
const Family* find_family_by_architecture(const std::string& architecture);
// Every family, in the README's order.
const std::vector<Family>& families();
// "LlamaForCausalLM, Qwen2ForCausalLM, ..." and "llama, qwen2, ...", for messages.
std::string supported_architectures();
std::string supported_model_types();

}  // namespace kubetune::model
