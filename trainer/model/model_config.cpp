#include "trainer/model/model_config.h"

#include <sys/stat.h>

#include <algorithm>
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
  if (!has_value(j, key)) fail(source, key, "missing (required)");
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

// The family named by model_type; each entry of "architectures" must be that family's.
void read_family(ModelConfig& c, const json& j, const std::string& source) {
  if (has_value(j, "architectures")) {
    if (!j["architectures"].is_array()) fail(source, "architectures", "expected an array");
    for (const auto& a : j["architectures"]) {
      std::string name = a.is_string() ? a.get<std::string>() : a.dump();
      if (find_family_by_architecture(name)) continue;
      fail(source, "architectures",
           "unsupported architecture \"" + name + "\" (supported: " + supported_architectures() +
               ", and the language model of Gemma3ForConditionalGeneration)");
    }
  }
  c.model_type = optional_value<std::string>(j, "model_type", "", source);
  c.family = find_family(c.model_type);
  if (!c.family)
    fail(source, "model_type",
         "unsupported model type \"" + c.model_type + "\" (supported: " + supported_model_types() +
             ")");
}

// partial_rotary_factor: the fraction of each head that RoPE rotates, in (0, 1].
double rotary_fraction(const json& j, double fallback, const std::string& source,
                       const std::string& parent = "") {
  const double v = positive(j, "partial_rotary_factor", fallback, source, parent);
  if (v > 1)
    fail(source, parent.empty() ? "partial_rotary_factor" : parent + ".partial_rotary_factor",
         "must be at most 1, got " + json(v).dump());
  return v;
}

std::vector<double> factor_list(const json& r, const char* key, int64_t expected,
                                const std::string& source, const std::string& parent) {
  const std::string field = parent + "." + key;
  if (!has_value(r, key) || !r[key].is_array())
    fail(source, field, "required for longrope: a list");
  std::vector<double> out;
  for (const auto& v : r[key]) {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
      fail(source, field, "entries must be positive numbers, got " + v.dump());
    out.push_back(v.get<double>());
  }
  if (static_cast<int64_t>(out.size()) != expected)
    fail(source, field,
         "needs " + std::to_string(expected) + " entries (one per rotated frequency), got " +
             std::to_string(out.size()));
  return out;
}

// transformers' _compute_yarn_parameters: without a factor, the ratio of the context lengths;
// without an attention_factor, 0.1 ln(factor) + 1 (or the ratio of two such terms scaled by
// mscale and mscale_all_dim).
void read_yarn(Rope& rope, const json& r, const ModelConfig& c, const std::string& key,
               const std::string& source) {
  const double original = static_cast<double>(rope.original_max_position_embeddings);
  if (!has_value(r, "factor"))
    rope.factor = static_cast<double>(c.max_position_embeddings) / original;
  const double factor = rope.factor;
  auto get_mscale = [factor](double m) {
    return factor <= 1 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
  };
  const double m = optional_value<double>(r, "mscale", 0.0, source);
  const double m_all = optional_value<double>(r, "mscale_all_dim", 0.0, source);
  rope.attention_factor =
      m != 0 && m_all != 0 ? get_mscale(m) / get_mscale(m_all) : get_mscale(1.0);
  rope.attention_factor = positive(r, "attention_factor", rope.attention_factor, source, key);
  // transformers treats 0 (and null) as unset for the betas.
  rope.beta_fast = optional_value<double>(r, "beta_fast", 0.0, source);
  rope.beta_slow = optional_value<double>(r, "beta_slow", 0.0, source);
  if (rope.beta_fast == 0) rope.beta_fast = 32;
  if (rope.beta_slow == 0) rope.beta_slow = 1;
  rope.truncate = optional_value<bool>(r, "truncate", true, source);
}

// One rope_parameters (or rope_scaling) object into `rope`, whose theta is already the default.
// `top` is the whole config (transformers 4 keeps original_max_position_embeddings and
// partial_rotary_factor there).
void read_rope_object(Rope& rope, const json& r, const std::string& key, const ModelConfig& c,
                      const json& top, const std::string& source) {
  if (!r.is_object()) fail(source, key, "expected an object");
  rope.theta = positive(r, "rope_theta", rope.theta, source, key);
  std::string type = optional_value<std::string>(r, "rope_type", "", source);
  if (type.empty()) type = optional_value<std::string>(r, "type", "default", source);
  if (type == "su") type = "longrope";  // Phi-3's first name for it, as transformers maps it
  static const char* kTypes[] = {"default", "linear", "dynamic", "llama3", "longrope", "yarn"};
  if (std::find(std::begin(kTypes), std::end(kTypes), type) == std::end(kTypes))
    fail(source, key + ".rope_type",
         "unsupported RoPE type \"" + type +
             "\" (supported: default, linear, dynamic, llama3, longrope, yarn)");
  rope.type = type;
  rope.partial_rotary_factor = rotary_fraction(r, rotary_fraction(top, 1.0, source), source, key);
  rope.factor = positive(r, "factor", 1.0, source, key);
  rope.low_freq_factor = positive(r, "low_freq_factor", 1.0, source, key);
  rope.high_freq_factor = positive(r, "high_freq_factor", 4.0, source, key);
  // YaRN's pre-training length defaults to the model's (transformers' standardize_rope_params).
  const int64_t length_default = type == "yarn" ? c.max_position_embeddings : 8192;
  rope.original_max_position_embeddings = optional_value<int64_t>(
      r, "original_max_position_embeddings",
      optional_value<int64_t>(top, "original_max_position_embeddings", length_default, source),
      source);
  if (type == "longrope") {
    // transformers' _compute_longrope_parameters: without a factor, the ratio of the context
    // lengths; without an attention_factor, the paper's sqrt(1 + ln(factor) / ln(original)).
    const double original = static_cast<double>(rope.original_max_position_embeddings);
    if (!has_value(r, "factor"))
      rope.factor = static_cast<double>(c.max_position_embeddings) / original;
    rope.attention_factor =
        rope.factor <= 1 ? 1.0 : std::sqrt(1 + std::log(rope.factor) / std::log(original));
    rope.attention_factor = positive(r, "attention_factor", rope.attention_factor, source, key);
    const int64_t rotated = c.rotary_dim(rope) / 2;
    rope.short_factor = factor_list(r, "short_factor", rotated, source, key);
    rope.long_factor = factor_list(r, "long_factor", rotated, source, key);
  } else if (type == "yarn") {
    read_yarn(rope, r, c, key, source);
  } else if (type != "default" && !has_value(r, "factor")) {
    fail(source, key + ".factor", "required for RoPE type \"" + type + "\"");
  }
}

// transformers 5 writes "rope_parameters" (with rope_theta inside; for Gemma 3 one object per
// layer type); transformers 4 writes "rope_theta" and "rope_scaling" (with "type" or "rope_type"),
// and Gemma 3's sliding layers' base as "rope_local_base_freq".
void read_rope(ModelConfig& c, const json& j, const std::string& source) {
  const Family& f = *c.family;
  c.rope.theta = positive(j, "rope_theta", f.default_rope_theta, source);
  c.local_rope.theta = positive(j, "rope_local_base_freq", f.default_local_rope_theta, source);
  c.rope.partial_rotary_factor = rotary_fraction(j, 1.0, source);
  const bool v5 = has_value(j, "rope_parameters");
  const std::string key = v5 ? "rope_parameters" : "rope_scaling";
  const bool per_type = f.rope_per_layer_type && v5 && j[key].is_object() &&
                        (j[key].contains("full_attention") || j[key].contains("sliding_attention"));
  if (per_type) {
    for (const auto& [type, rope] : {std::pair<const char*, Rope*>{"full_attention", &c.rope},
                                     {"sliding_attention", &c.local_rope}})
      if (has_value(j[key], type))
        read_rope_object(*rope, j[key][type], key + "." + type, c, j, source);
  } else if (has_value(j, key.c_str())) {
    // Gemma 3's transformers-4 rope_scaling is the global layers' only.
    read_rope_object(c.rope, j[key], key, c, j, source);
  }
  if (!f.rope_per_layer_type) {
    c.local_rope = c.rope;
  } else if (!per_type) {
    const double local_theta = c.local_rope.theta;
    c.local_rope = Rope();
    c.local_rope.theta = local_theta;
  }
  for (const Rope* rope : {&c.rope, &c.local_rope})
    if (c.rotary_dim(*rope) % 2 != 0)
      fail(source, "partial_rotary_factor", "must leave an even number of rotated dimensions");
}

std::vector<bool> layers_of_type(const json& j, int64_t layers, const std::string& source) {
  auto types = optional_value<std::vector<std::string>>(j, "layer_types", {}, source);
  if (static_cast<int64_t>(types.size()) != layers)
    fail(source, "layer_types", "needs one entry per layer");
  std::vector<bool> sliding(layers, false);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "sliding_attention" && types[i] != "full_attention")
      fail(source, "layer_types",
           "entries are \"full_attention\" or \"sliding_attention\", got \"" + types[i] + "\"");
    sliding[i] = types[i] == "sliding_attention";
  }
  return sliding;
}

// Which layers attend through a window, by the family's rule (family.h: SlidingLayers).
void read_sliding_window(ModelConfig& c, const json& j, const std::string& source) {
  c.sliding_layers.assign(c.num_hidden_layers, false);
  const SlidingLayers rule = c.family->sliding;
  if (rule == SlidingLayers::kNone || !has_value(j, "sliding_window")) return;
  const int64_t window = optional_value<int64_t>(j, "sliding_window", 0, source);
  if (window < 0)
    fail(source, "sliding_window", "must not be negative, got " + j["sliding_window"].dump());
  if (rule == SlidingLayers::kEveryLayer) {
    c.sliding_window = window;
    c.sliding_layers.assign(c.num_hidden_layers, window > 0);
    return;
  }
  if (rule == SlidingLayers::kLayerTypes) {
    c.sliding_window = window;
    if (has_value(j, "layer_types")) {
      c.sliding_layers = layers_of_type(j, c.num_hidden_layers, source);
      return;
    }
    const int64_t pattern = optional_value<int64_t>(
        j, "sliding_window_pattern",
        optional_value<int64_t>(j, "_sliding_window_pattern", c.family->sliding_pattern, source),
        source);
    if (pattern <= 0) fail(source, "sliding_window_pattern", "must be positive");
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers[i] = (i + 1) % pattern != 0;
    return;
  }
  if (!optional_value<bool>(j, "use_sliding_window", false, source)) return;
  c.sliding_window = window;
  if (has_value(j, "layer_types")) {
    c.sliding_layers = layers_of_type(j, c.num_hidden_layers, source);
    return;
  }
  const int64_t first = optional_value<int64_t>(j, "max_window_layers", 0, source);
  // Larger than the layer count means no sliding layer, as in transformers (Qwen2.5 configs ship
  // 70 with 36 layers); negative would index before the first layer.
  if (first < 0)
    fail(source, "max_window_layers", "must not be negative, got " + j["max_window_layers"].dump());
  for (int64_t i = first; i < c.num_hidden_layers; ++i) c.sliding_layers[i] = true;
}

// The options some families have that kubetune does not implement: refused by name unless off.
void refuse_unimplemented_options(const json& j, const Family& f, const std::string& source) {
  for (const char* key : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (has_value(j, key))
      fail(source, key, "logit soft-capping is not supported (Gemma 2's); must be null");
  if (optional_value<bool>(j, "use_bidirectional_attention", false, source))
    fail(source, "use_bidirectional_attention", "only causal attention is supported");
  if (f.has_residual_dropout)
    for (const char* key : {"resid_pdrop", "embd_pdrop"})
      if (optional_value<double>(j, key, 0.0, source) != 0.0)
        fail(source, key,
             "dropout on the residual branches and embeddings is not supported; must be 0");
}

void read_biases(ModelConfig& c, const json& j, const std::string& source) {
  const bool flag = optional_value<bool>(j, "attention_bias", false, source);
  switch (c.family->attention_bias) {
    case AttentionBias::kNone:
      c.attention_bias = false;
      break;
    case AttentionBias::kQkvOnly:
      c.attention_bias = true;
      break;
    case AttentionBias::kConfigFlags:
      c.attention_bias = flag;
      c.mlp_bias = optional_value<bool>(j, "mlp_bias", false, source);
      break;
    case AttentionBias::kAttentionFlag:
      c.attention_bias = flag;
      break;
  }
}

void read_activation(ModelConfig& c, const json& j, const std::string& source) {
  const Family& f = *c.family;
  const std::string act =
      optional_value<std::string>(j, f.activation_field, f.default_activation, source);
  if (act == "silu" || act == "swish") return;
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") {
    c.gelu_tanh = true;
    return;
  }
  fail(source, f.activation_field,
       "unsupported activation \"" + act + "\" (supported: silu, gelu_pytorch_tanh)");
}

// A non-negative integer field (0 allowed, unlike required_int's).
int64_t count_field(const json& j, const char* key, int64_t fallback, const std::string& source) {
  const int64_t v = optional_value<int64_t>(j, key, fallback, source);
  if (v < 0 || v > kMaxDimension) fail(source, key, "must not be negative, got " + j[key].dump());
  return v;
}

// The experts of a mixture-of-experts family (family.h: Experts), and which layers have them.
void read_experts(ModelConfig& c, const json& j, const std::string& source) {
  const ExpertLayout& e = c.family->experts;
  c.sparse_layers.assign(c.num_hidden_layers, false);
  if (!c.family->has_experts()) return;
  // transformers 5 writes Qwen3-MoE's num_experts as num_local_experts.
  const char* count = has_value(j, e.count_field) || !has_value(j, "num_local_experts")
                          ? e.count_field
                          : "num_local_experts";
  c.num_experts = required_int(j, count, source);
  c.experts_per_token = required_int(j, "num_experts_per_tok", source);
  if (c.experts_per_token > c.num_experts)
    fail(source, "num_experts_per_tok",
         "must be at most " + std::string(count) + " (" + std::to_string(c.num_experts) +
             "), got " + std::to_string(c.experts_per_token));
  c.expert_intermediate_size = required_int(j, e.width_field, source);
  c.norm_topk_prob =
      e.normalizes_always || optional_value<bool>(j, "norm_topk_prob", false, source);
  if (optional_value<double>(j, "router_jitter_noise", 0.0, source) != 0.0)
    fail(source, "router_jitter_noise", "noise on the router's input is not supported; must be 0");
  if (e.clamped_swiglu) {
    c.swiglu_alpha = positive(j, "swiglu_alpha", 1.702, source);
    c.swiglu_limit = positive(j, "swiglu_limit", 7.0, source);
  }
  if (optional_value<bool>(j, "output_router_logits", false, source))
    c.router_aux_loss_coef =
        number_in(j, "router_aux_loss_coef", 0.001, 0.0, HUGE_VAL, true, source);
  int64_t step = 1;
  std::vector<int64_t> dense;
  if (e.sparse_step) {
    step = count_field(j, "decoder_sparse_step", 1, source);
    if (step == 0) fail(source, "decoder_sparse_step", "must be at least 1, got 0");
    dense = optional_value<std::vector<int64_t>>(j, "mlp_only_layers", {}, source);
    for (int64_t l : dense)
      if (l < 0 || l >= c.num_hidden_layers)
        fail(source, "mlp_only_layers",
             "entries are layer indices below num_hidden_layers, got " + std::to_string(l));
  }
  // transformers: sparse when not in mlp_only_layers and (layer + 1) % decoder_sparse_step == 0.
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    c.sparse_layers[l] =
        (l + 1) % step == 0 && std::find(dense.begin(), dense.end(), l) == dense.end();
}

// Multimodal architectures whose language model kubetune trains (its vision tower and projector
// carried along untouched), and the model_type of that language model's text_config.
const char* multimodal_language_model(const json& j) {
  static const std::pair<const char*, const char*> kWrappers[] = {
      {"Gemma3ForConditionalGeneration", "gemma3_text"}};
  if (!has_value(j, "architectures") || !j["architectures"].is_array()) return nullptr;
  for (const auto& a : j["architectures"])
    for (const auto& [architecture, model_type] : kWrappers)
      if (a == architecture) return model_type;
  return nullptr;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw std::runtime_error(source + ": expected a JSON object");
  if (const char* model_type = multimodal_language_model(j)) {
    if (!has_value(j, "text_config") || !j["text_config"].is_object())
      fail(source, "text_config",
           "missing: a multimodal checkpoint's language model is read from it");
    json text = j["text_config"];
    text["architectures"] = json::array();  // the wrapper's, checked above
    if (!has_value(text, "model_type")) text["model_type"] = model_type;
    // What transformers keeps at the top of a multimodal config applies to its language model.
    for (const char* key : {"quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"})
      if (has_value(j, key) && !has_value(text, key)) text[key] = j[key];
    ModelConfig c = from_json(text, source + ": text_config");
    c.raw = j;
    return c;
  }
  ModelConfig c;
  c.raw = j;
  if (has_value(j, "quantization_config")) {
    // A checkpoint saved already quantized. bitsandbytes' 4-bit format is read as it is; other
    // formats (GPTQ, AWQ, bitsandbytes 8-bit) are not the tensors this loader reads.
    const json& q = j["quantization_config"];
    const std::string method = q.is_object() ? q.value("quant_method", "?") : "?";
    const bool four_bit =
        q.is_object() && (q.value("load_in_4bit", false) || q.value("_load_in_4bit", false));
    // OpenAI's gpt-oss checkpoints keep the experts in MXFP4: read made whole (io/mxfp4.h).
    const bool mxfp4 = method == "mxfp4" && j.value("model_type", "") == "gpt_oss";
    if (!mxfp4 && (method != "bitsandbytes" || !four_bit)) {
      fail(source, "quantization_config",
           "the checkpoint is quantized with quant_method \"" + method + "\"" +
               (method == "bitsandbytes" ? " in 8 bits" : "") +
               ", which kubetune cannot load: use the bf16 or fp32 checkpoint (method.type qlora "
               "quantizes it to 4 bits), or a bitsandbytes 4-bit one");
    }
    c.bnb_4bit = !mxfp4;
  }
  read_family(c, j, source);
  refuse_unimplemented_options(j, *c.family, source);
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
  // Gemma ties its embeddings unless told otherwise; the others do not.
  c.tie_word_embeddings =
      optional_value<bool>(j, "tie_word_embeddings", c.family->scaled_embedding, source);
  read_biases(c, j, source);
  c.attention_dropout = number_in(j, "attention_dropout", 0.0, 0.0, 1.0, true, source);
  c.initializer_range = optional_value<double>(j, "initializer_range", 0.02, source);
  read_activation(c, j, source);
  c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  if (c.family->query_pre_attn_scalar)
    c.attention_scale = 1.0 / std::sqrt(positive(j, "query_pre_attn_scalar", 256.0, source));
  c.torch_dtype = optional_value<std::string>(j, "torch_dtype", "float32", source);
  c.torch_dtype = optional_value<std::string>(j, "dtype", c.torch_dtype, source);
  read_rope(c, j, source);
  read_sliding_window(c, j, source);
  read_experts(c, j, source);
  return c;
}

ModelConfig ModelConfig::from_dir(const std::string& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error(dir + ": model directory does not exist");
  std::string path = dir + "/config.json";
  if (!std::ifstream(path))
    throw std::runtime_error(path + ": cannot open (is this a Hugging Face model folder?)");
  ModelConfig c = from_json(read_json_file_strict(path), path);
  c.source_dir = dir;
  return c;
}

int64_t ModelConfig::window_for_layer(int64_t layer) const {
  bool sliding = layer < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[layer];
  return sliding ? sliding_window : 0;
}

const Rope& ModelConfig::rope_for_layer(int64_t layer) const {
  const bool sliding = layer < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[layer];
  return sliding && family->rope_per_layer_type ? local_rope : rope;
}

int64_t ModelConfig::rotary_dim(const Rope& r) const {
  return static_cast<int64_t>(head_dim * r.partial_rotary_factor);
}

std::vector<LinearShape> ModelConfig::decoder_linears(int64_t layer) const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim,
                kv = num_key_value_heads * head_dim, i = intermediate_size;
  std::vector<LinearShape> out;
  if (family->fused_qkv) {
    out.push_back({"self_attn.qkv_proj", h, q + 2 * kv, attention_bias});
  } else {
    out.push_back({"self_attn.q_proj", h, q, attention_bias});
    out.push_back({"self_attn.k_proj", h, kv, attention_bias});
    out.push_back({"self_attn.v_proj", h, kv, attention_bias});
  }
  out.push_back({"self_attn.o_proj", q, h, o_proj_bias()});
  if (is_sparse(layer)) {
    const int64_t e = expert_intermediate_size;
    const bool bias = family->experts.biases;
    out.push_back({"mlp.experts.gate_up_proj", h, 2 * e, bias, num_experts});
    out.push_back({"mlp.experts.down_proj", e, h, bias, num_experts});
    return out;
  }
  if (family->fused_gate_up) {
    out.push_back({"mlp.gate_up_proj", h, 2 * i, mlp_bias});
  } else {
    out.push_back({"mlp.gate_proj", h, i, mlp_bias});
    out.push_back({"mlp.up_proj", h, i, mlp_bias});
  }
  out.push_back({"mlp.down_proj", i, h, mlp_bias});
  return out;
}

int64_t ModelConfig::parameters_of_layer(int64_t layer) const {
  int64_t n = 0;
  for (const auto& l : decoder_linears(layer))
    n += l.weights() + (l.bias ? l.out * std::max<int64_t>(l.experts, 1) : 0);
  const int64_t norms = family->sandwich_norms ? 4 : 2;
  const int64_t router =
      is_sparse(layer) ? num_experts * (hidden_size + (family->experts.router_bias ? 1 : 0)) : 0;
  const int64_t sinks = family->attention_sinks ? num_attention_heads : 0;
  return n + router + sinks + norms * hidden_size + (family->qk_norm ? 2 * head_dim : 0);
}

int64_t ModelConfig::largest_layer_parameters() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) n = std::max(n, parameters_of_layer(l));
  return n;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t embed = vocab_size * hidden_size;
  int64_t layers = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) layers += parameters_of_layer(l);
  return embed + layers + hidden_size + (tie_word_embeddings ? 0 : embed);
}

int64_t ModelConfig::active_parameters() const {
  int64_t idle = 0;  // the weights of the experts a token is not routed to
  for (int64_t l = 0; l < num_hidden_layers; ++l)
    for (const auto& linear : decoder_linears(l))
      if (linear.experts > 0) idle += linear.in * linear.out * (linear.experts - experts_per_token);
  return num_parameters() - idle;
}

}  // namespace kubetune::model
