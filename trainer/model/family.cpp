#include "trainer/model/family.h"

namespace kubetune::model {

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = [] {
    std::vector<Family> f;

    // Llama 2, 3, 3.1, 3.2, 3.3 (and SmolLM, TinyLlama and other LlamaForCausalLM checkpoints).
    Family llama{"llama", "LlamaForCausalLM", "Llama"};
    llama.attention_bias = AttentionBias::kConfigFlags;
    f.push_back(llama);

    // Qwen2 and Qwen2.5: biases on q, k and v; a window on the layers use_sliding_window marks.
    Family qwen2{"qwen2", "Qwen2ForCausalLM", "Qwen2 / Qwen2.5"};
    qwen2.attention_bias = AttentionBias::kQkvOnly;
    qwen2.sliding = SlidingLayers::kMarkedWhenEnabled;
    f.push_back(qwen2);

    // Qwen3 (dense): Qwen2's layout without its biases, with RMSNorms over each head of q and k,
    // and a head_dim of its own (128 where hidden_size / heads is 80 or 160).
    Family qwen3{"qwen3", "Qwen3ForCausalLM", "Qwen3"};
    qwen3.attention_bias = AttentionBias::kAttentionFlag;
    qwen3.sliding = SlidingLayers::kMarkedWhenEnabled;
    qwen3.qk_norm = true;
    f.push_back(qwen3);

    // Mistral 7B and Nemo: Llama's layout, a window on every layer when sliding_window is set.
    Family mistral{"mistral", "MistralForCausalLM", "Mistral"};
    mistral.sliding = SlidingLayers::kEveryLayer;
    f.push_back(mistral);

    // Gemma 3 (text; the 1B checkpoint, and the language model of 4B-27B): (1 + w) norms around
    // both halves of each layer, q and k norms, GeGLU, embeddings scaled by sqrt(hidden), a softmax
    // scale from query_pre_attn_scalar, and five sliding-window layers to each global one, with
    // RoPE bases of their own (10k local, 1M global, the global one scaled in 4B-27B).
    Family gemma3{"gemma3_text", "Gemma3ForCausalLM", "Gemma 3"};
    gemma3.attention_bias = AttentionBias::kAttentionFlag;
    gemma3.sliding = SlidingLayers::kLayerTypes;
    gemma3.norm_weight = NormWeight::kOnePlusScale;
    gemma3.qk_norm = true;
    gemma3.sandwich_norms = true;
    gemma3.scaled_embedding = true;
    gemma3.rope_per_layer_type = true;
    gemma3.query_pre_attn_scalar = true;
    gemma3.activation_field = "hidden_activation";
    gemma3.default_activation = "gelu_pytorch_tanh";
    gemma3.default_rope_theta = 1'000'000;
    gemma3.default_local_rope_theta = 10'000;
    f.push_back(gemma3);

    // Phi-3, Phi-3.5 and Phi-4 (Phi3ForCausalLM): q, k and v in one qkv_proj, gate and up in one
    // gate_up_proj (as stored, and as PEFT adapts them), LongRoPE in the long-context checkpoints,
    // partial rotary embeddings in Phi-4-mini.
    Family phi3{"phi3", "Phi3ForCausalLM", "Phi-3 / Phi-4"};
    phi3.sliding = SlidingLayers::kEveryLayer;
    phi3.fused_qkv = true;
    phi3.fused_gate_up = true;
    phi3.has_residual_dropout = true;
    f.push_back(phi3);

    // Qwen3-MoE (30B-A3B, 235B-A22B): Qwen3's attention; in the sparse layers 128 small experts
    // of which each token takes 8, the top-k weights renormalised when norm_topk_prob; dense
    // layers where decoder_sparse_step or mlp_only_layers say so.
    Family qwen3_moe{"qwen3_moe", "Qwen3MoeForCausalLM", "Qwen3-MoE"};
    qwen3_moe.attention_bias = AttentionBias::kAttentionFlag;
    qwen3_moe.sliding = SlidingLayers::kMarkedWhenEnabled;
    qwen3_moe.qk_norm = true;
    qwen3_moe.experts.block = "mlp";
    qwen3_moe.experts.sparse_step = true;
    f.push_back(qwen3_moe);

    // Mixtral 8x7B and 8x22B: Mistral's attention; every layer sparse, 8 experts stored as
    // block_sparse_moe.experts.N.w1 (gate), w3 (up) and w2 (down), top 2 always renormalised.
    Family mixtral{"mixtral", "MixtralForCausalLM", "Mixtral"};
    mixtral.sliding = SlidingLayers::kEveryLayer;
    mixtral.default_rope_theta = 1'000'000;
    mixtral.experts.block = "block_sparse_moe";
    mixtral.experts.gate = "w1";
    mixtral.experts.up = "w3";
    mixtral.experts.down = "w2";
    mixtral.experts.count_field = "num_local_experts";
    mixtral.experts.width_field = "intermediate_size";
    mixtral.experts.normalizes_always = true;
    mixtral.experts.weights_in_hidden_dtype = false;
    f.push_back(mixtral);

    // gpt-oss 20B and 120B: biases on every attention projection, a learned sink logit per head,
    // sliding-window and full layers in turn, YaRN RoPE; every layer sparse, its router with a
    // bias and a softmax over the top 4 logits, experts with biases and a clamped SwiGLU, their
    // stacks stored whole (MXFP4 in OpenAI's checkpoints: io/mxfp4.h).
    Family gpt_oss{"gpt_oss", "GptOssForCausalLM", "gpt-oss"};
    gpt_oss.attention_bias = AttentionBias::kAttentionFlag;
    gpt_oss.sliding = SlidingLayers::kLayerTypes;
    gpt_oss.sliding_pattern = 2;
    gpt_oss.norm_weight = NormWeight::kScaleInFloat;
    gpt_oss.attention_sinks = true;
    gpt_oss.default_rope_theta = 150'000;
    gpt_oss.experts.block = "mlp";
    gpt_oss.experts.count_field = "num_local_experts";
    gpt_oss.experts.width_field = "intermediate_size";
    gpt_oss.experts.router = "router";
    gpt_oss.experts.router_bias = true;
    gpt_oss.experts.softmax_over_top_k = true;
    gpt_oss.experts.biases = true;
    gpt_oss.experts.interleaved_gate_up = true;
    gpt_oss.experts.clamped_swiglu = true;
    gpt_oss.experts.stored_transposed = true;
    f.push_back(gpt_oss);
    return f;
  }();
  return kFamilies;
}

const Family* find_family(const std::string& model_type) {
  for (const auto& f : families())
    if (model_type == f.model_type) return &f;
  return nullptr;
}

const Family* find_family_by_architecture(const std::string& architecture) {
  for (const auto& f : families())
    if (architecture == f.architecture) return &f;
  return nullptr;
}

namespace {
std::string joined(const char* Family::*field) {
  std::string out;
  for (const auto& f : families()) out += (out.empty() ? "" : ", ") + std::string(f.*field);
  return out;
}
}  // namespace

std::string supported_architectures() { return joined(&Family::architecture); }
std::string supported_model_types() { return joined(&Family::model_type); }

}  // namespace kubetune::model
