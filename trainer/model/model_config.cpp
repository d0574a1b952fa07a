#include "trainer/model/model_config.h"

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <stdexcept>

#include "common/strict_json.h"

namespace kubetune::model {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& field,
                       const std::string& what) {
  throw std::runtime_error(source + ": field \"" + field + "\": " + what);
}

bool has_value(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// Far above any released model (vocabularies are < 300k, hidden sizes < 30k, layers < 200), far
// below sizes whose products overflow int64 or whose allocation would fail with a bare bad_alloc.
constexpr int64_t kMaxDimension = int64_t{1} << 24;

int64_t required_int(const json& j, const char* key, const std::string& source) {
  if (!has_value(j, key)) fail(source, key, "missing (required for Llama-family models)");
  if (!j[key].is_number_integer()) fail(source, key, "expected an integer");
  int64_t v = j[key].get<int64_t>();
  if (v <= 0 || v > kMaxDimension)
    fail(source, key,
         "must be between 1 and " + std::to_string(kMaxDimension) + ", got " + j[key].dump());
  return v;
}

template <typename T>
T optional_value(const json& j, const char* key, T fallback, const std::string& source) {
  if (!has_value(j, key)) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception& e) {
    fail(source, key, std::string("wrong type: ") + e.what());
  }
}

// A real number in [low, high) or (low, high): NaN, inf, zero or negative values of rope_theta or
// rms_norm_eps give NaN logits from the first step, so they are refused here, naming the field.
// A real number in [low, high) or (low, high): NaN, inf, zero or negative values of rope_theta or
// rms_norm_eps give NaN logits from the first step, so they are refused here, naming the field
// (`parent.key` for one inside rope_scaling or rope_parameters).
double number_in(const json& j, const char* key, double fallback, double low, double high,
                 bool low_inclusive, const std::string& source, const std::string& parent = "") {
  const double v = optional_value<double>(j, key, fallback, source);
  if (!std::isfinite(v) || v < low || (v == low && !low_inclusive) || v >= high)
    fail(source, parent.empty() ? key : parent + "." + key,
         "must be " + std::string(low_inclusive ? ">= " : "> ") + json(low).dump() +
             (std::isfinite(high) ? " and < " + json(high).dump() : "") + ", got " +
             (has_value(j, key) ? j[key].dump() : json(v).dump()));
  return v;
}

double positive(const json& j, const char* key, double fallback, const std::string& source,
                const std::string& parent = "") {
  return number_in(j, key, fallback, 0.0, HUGE_VAL, false, source, parent);
}

void read_architecture(ModelConfig& c, const json& j, const std::string& source) {
  static const std::vector<std::pair<std::string, std::string>> kKnown = {
      {"llama", "LlamaForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"},
      {"mistral", "MistralForCausalLM"}};
  if (has_value(j, "architectures")) {
    if (!j["architectures"].is_array()) fail(source, "architectures", "expected an array");
    for (const auto& a : j["architectures"]) {
      std::string name = a.is_string() ? a.get<std::string>() : a.dump();
      bool known = false;
      for (const auto& [type, arch] : kKnown) known |= (arch == name);
      if (!known)
        fail(source, "architectures",
             "unsupported architecture \"" + name +
                 "\" (supported: LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM)");
    }
  }
  c.model_type = optional_value<std::string>(j, "model_type", "", source);
  bool type_known = false;
  for (const auto& [type, arch] : kKnown) type_known |= (type == c.model_type);
  if (!type_known)
    fail(source, "model_type",
         "unsupported model type \"" + c.model_type + "\" (supported: llama, qwen2, mistral)");
}

// transformers 5 writes "rope_parameters" (with rope_theta inside); transformers 4 writes
// "rope_theta" and "rope_scaling" (with "type" or "rope_type").
void read_rope(ModelConfig& c, const json& j, const std::string& source) {
  c.rope_theta = positive(j, "rope_theta", 10000.0, source);
  const char* key = has_value(j, "rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (!has_value(j, key)) return;
  const json& r = j[key];
  if (!r.is_object()) fail(source, key, "expected an object");
  c.rope_theta = positive(r, "rope_theta", c.rope_theta, source, key);
  std::string type = optional_value<std::string>(r, "rope_type", "", source);
  if (type.empty()) type = optional_value<std::string>(r, "type", "default", source);
  if (type != "default" && type != "linear" && type != "dynamic" && type != "llama3")
    fail(source, std::string(key) + ".rope_type",
         "unsupported RoPE type \"" + type + "\" (supported: default, linear, dynamic, llama3)");
  if (optional_value<double>(r, "partial_rotary_factor", 1.0, source) != 1.0)
    fail(source, std::string(key) + ".partial_rotary_factor", "only 1.0 is supported");
  RopeScaling& s = c.rope_scaling;
  s.type = type;
  s.factor = positive(r, "factor", 1.0, source, key);
  s.low_freq_factor = positive(r, "low_freq_factor", 1.0, source, key);
  s.high_freq_factor = positive(r, "high_freq_factor", 4.0, source, key);
  s.original_max_position_embeddings =
      optional_value<int64_t>(r, "original_max_position_embeddings", 8192, source);
  if (type != "default" && !has_value(r, "factor"))
    fail(source, std::string(key) + ".factor", "required for RoPE type \"" + type + "\"");
}

// Mistral applies its window to every layer; Qwen2 only to the layers marked
// "sliding_attention" (transformers 5 layer_types, or use_sliding_window + max_window_layers).
void read_sliding_window(ModelConfig& c, const json& j, const std::string& source) {
  c.sliding_layers.assign(c.num_hidden_layers, false);
  if (c.model_type == "llama" || !has_value(j, "sliding_window")) return;
  const int64_t window = optional_value<int64_t>(j, "sliding_window", 0, source);
  if (window < 0)
    fail(source, "sliding_window", "must not be negative, got " + j["sliding_window"].dump());
  if (c.model_type == "mistral") {
    c.sliding_window = window;
    c.sliding_layers.assign(c.num_hidden_layers, window > 0);
    return;
  }
  if (!optional_value<bool>(j, "use_sliding_window", false, source)) return;
  c.sliding_window = window;
  if (has_value(j, "layer_types")) {
    auto types = optional_value<std::vector<std::string>>(j, "layer_types", {}, source);
    if (static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      fail(source, "layer_types", "needs one entry per layer");
    for (size_t i = 0; i < types.size(); ++i) c.sliding_layers[i] = types[i] == "sliding_attention";
    return;
  }
  const int64_t first = optional_value<int64_t>(j, "max_window_layers", 0, source);
  // Larger than the layer count means no sliding layer, as in transformers (Qwen2.5 configs ship
  // 70 with 36 layers); negative would index before the first layer.
  if (first < 0)
    fail(source, "max_window_layers", "must not be negative, got " + j["max_window_layers"].dump());
  for (int64_t i = first; i < c.num_hidden_layers; ++i) c.sliding_layers[i] = true;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object");
  ModelConfig c;
  c.raw = j;
  if (has_value(j, "quantization_config")) {
    // A checkpoint saved already quantized. bitsandbytes' 4-bit format is read as it is; other
    // formats (GPTQ, AWQ, bitsandbytes 8-bit) are not the tensors this loader reads.
    const json& q = j["quantization_config"];
    const std::string method = q.is_object() ? q.value("quant_method", "?") : "?";
    const bool four_bit =
        q.is_object() && (q.value("load_in_4bit", false) || q.value("_load_in_4bit", false));
    if (method != "bitsandbytes" || !four_bit) {
      fail(source, "quantization_config",
           "the checkpoint is quantized with quant_method \"" + method + "\"" +
               (method == "bitsandbytes" ? " in 8 bits" : "") +
               ", which kubetune cannot load: use the bf16 or fp32 checkpoint (method.type qlora "
               "quantizes it to 4 bits), or a bitsandbytes 4-bit one");
    }
    c.bnb_4bit = true;
  }
  read_architecture(c, j, source);
  c.vocab_size = required_int(j, "vocab_size", source);
  c.hidden_size = required_int(j, "hidden_size", source);
  c.intermediate_size = required_int(j, "intermediate_size", source);
  c.num_hidden_layers = required_int(j, "num_hidden_layers", source);
  c.num_attention_heads = required_int(j, "num_attention_heads", source);
  c.num_key_value_heads = has_value(j, "num_key_value_heads")
                              ? required_int(j, "num_key_value_heads", source)
                              : c.num_attention_heads;
  c.head_dim = has_value(j, "head_dim") ? required_int(j, "head_dim", source)
                                        : c.hidden_size / c.num_attention_heads;
  if (c.head_dim <= 0) fail(source, "num_attention_heads", "larger than hidden_size");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(source, "num_key_value_heads", "must divide num_attention_heads");
  if (has_value(j, "max_position_embeddings"))
    c.max_position_embeddings = required_int(j, "max_position_embeddings", source);
  c.rms_norm_eps = positive(j, "rms_norm_eps", 1e-6, source);
  c.tie_word_embeddings = optional_value<bool>(j, "tie_word_embeddings", false, source);
  // Qwen2 always has q/k/v biases; Mistral never has biases; Llama follows its flags.
  c.attention_bias =
      c.model_type == "qwen2" ||
      (c.model_type == "llama" && optional_value<bool>(j, "attention_bias", false, source));
  c.mlp_bias = c.model_type == "llama" && optional_value<bool>(j, "mlp_bias", false, source);
  c.attention_dropout = number_in(j, "attention_dropout", 0.0, 0.0, 1.0, true, source);
  c.initializer_range = optional_value<double>(j, "initializer_range", 0.02, source);
  std::string act = optional_value<std::string>(j, "hidden_act", "silu", source);
  if (act != "silu")
    fail(source, "hidden_act", "unsupported activation \"" + act + "\" (only silu)");
  c.torch_dtype = optional_value<std::string>(j, "torch_dtype", "float32", source);
  c.torch_dtype = optional_value<std::string>(j, "dtype", c.torch_dtype, source);
  read_rope(c, j, source);
  read_sliding_window(c, j, source);
  return c;
}

ModelConfig ModelConfig::from_dir(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(dir + ": model directory does not exist");
  std::string path = dir + "/config.json";
  if (!std::ifstream(path))
    throw std::runtime_error(path + ": cannot open (is this a Hugging Face model folder?)");
  return from_json(read_json_file_strict(path), path);
}

int64_t ModelConfig::window_for_layer(int64_t layer) const {
  bool sliding = layer < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[layer];
  return sliding ? sliding_window : 0;
}

int64_t ModelConfig::parameters_per_layer() const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim,
                kv = num_key_value_heads * head_dim;
  int64_t attn = h * q + 2 * h * kv + q * h;
  if (attention_bias) attn += q + 2 * kv;
  if (o_proj_bias()) attn += h;
  int64_t mlp = 3 * h * intermediate_size + (mlp_bias ? 2 * intermediate_size + h : 0);
  return attn + mlp + 2 * h;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t embed = vocab_size * hidden_size;
  return embed + num_hidden_layers * parameters_per_layer() + hidden_size +
         (tie_word_embeddings ? 0 : embed);
}

}  // namespace kubetune::model
