// The architecture of a Llama-family model, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kubetune::model {

// How RoPE frequencies are rescaled for long context ("rope_scaling" in transformers 4,
// "rope_parameters" in transformers 5). Supported types: default, linear, dynamic, llama3.
struct RopeScaling {
  std::string type = "default";
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // "llama" | "qwen2" | "mistral"
  int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0, num_hidden_layers = 0,
          num_attention_heads = 0, num_key_value_heads = 0, head_dim = 0,
          max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6, rope_theta = 10000;
  RopeScaling rope_scaling;
  // attention_bias: bias on q,k,v (and o for llama; Qwen2 has q,k,v bias but none on o).
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
  std::string torch_dtype = "float32";
  nlohmann::json raw;  // the original config.json (written back on save)

  // Throws std::runtime_error naming `source_name` and the field for unknown architectures,
  // missing fields and unsupported options.
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source_name);
  static ModelConfig from_dir(const std::string& dir);

  bool o_proj_bias() const { return attention_bias && model_type != "qwen2"; }
  int64_t window_for_layer(int64_t layer) const;  // 0 when the layer attends to the full prefix
  int64_t num_parameters() const;
  int64_t parameters_per_layer() const;  // of one decoder layer
};

}  // namespace kubetune::model
