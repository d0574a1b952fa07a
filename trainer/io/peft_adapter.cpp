#include "trainer/io/peft_adapter.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "common/strict_json.h"
#include "trainer/io/safetensors.h"

namespace kubetune::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kPrefix = "base_model.model.";

bool is_lora_name(const std::string& name) { return name.find(".lora_") != std::string::npos; }

[[noreturn]] void fail(const std::string& file, const std::string& field, const std::string& what) {
  throw std::runtime_error(file + ": field \"" + field + "\": " + what);
}

bool set_and_truthy(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return false;
  const json& v = j[key];
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) return !v.get<std::string>().empty() && v.get<std::string>() != "none";
  if (v.is_array() || v.is_object()) return !v.empty();
  return true;
}

// PEFT matches a string target_modules as a regex over full module names; rather than embed a
// regex engine we take the targets from the adapter's own tensor names.
std::vector<std::string> targets_from_tensors(const SafetensorsFile& f) {
  std::set<std::string> names;
  for (const auto& n : f.names()) {
    auto pos = n.find(".lora_A.");
    if (pos == std::string::npos) continue;
    std::string module = n.substr(0, pos);
    names.insert(module.substr(module.rfind('.') + 1));
  }
  return {names.begin(), names.end()};
}

// A rank_pattern or alpha_pattern whose keys name one module by its last name, as PEFT writes
// them (".*\\.gate_up_proj") or plainly; other regular expressions are refused.
template <typename T>
std::map<std::string, T> read_pattern(const json& j, const char* key, const std::string& path) {
  std::map<std::string, T> out;
  if (!set_and_truthy(j, key)) return out;
  if (!j[key].is_object()) fail(path, key, "expected an object");
  const std::string any_prefix = ".*\\.";
  for (auto it = j[key].begin(); it != j[key].end(); ++it) {
    std::string name = it.key();
    if (name.rfind(any_prefix, 0) == 0) name = name.substr(any_prefix.size());
    if (name.empty() || name.find_first_of(".*?+[]()^$|\\{}") != std::string::npos)
      fail(path, std::string(key) + "." + it.key(),
           "only patterns that name one module by its last name (\".*\\\\.gate_up_proj\") are "
           "supported");
    if (!it.value().is_number() || it.value().get<double>() <= 0)
      fail(path, std::string(key) + "." + it.key(), "expected a positive number");
    out[name] = it.value().get<T>();
  }
  return out;
}

template <typename T>
json pattern_json(const std::map<std::string, T>& pattern) {
  json out = json::object();
  for (const auto& [name, value] : pattern) out[".*\\." + name] = value;
  return out;
}

model::LoraConfig read_config(const std::string& path, const SafetensorsFile& weights,
                              const model::ModelConfig& model_config) {
  if (!std::ifstream(path))
    throw std::runtime_error(path + ": cannot open (is this a PEFT adapter folder?)");
  const json j = read_json_file_strict(path);
  if (j.value("peft_type", std::string("LORA")) != "LORA")
    fail(path, "peft_type", "only LORA adapters are supported");
  if (set_and_truthy(j, "use_dora")) fail(path, "use_dora", "DoRA is not supported");
  if (set_and_truthy(j, "fan_in_fan_out")) fail(path, "fan_in_fan_out", "not supported");
  for (const char* key : {"modules_to_save", "layers_to_transform", "layer_replication",
                          "lora_bias", "exclude_modules", "trainable_token_indices", "use_qalora"})
    if (set_and_truthy(j, key)) fail(path, key, "not supported");
  if (set_and_truthy(j, "bias")) fail(path, "bias", "only \"none\" is supported");
  model::LoraConfig cfg;
  try {
    cfg.r = j.at("r").get<int>();
    cfg.alpha = j.value("lora_alpha", static_cast<double>(cfg.r));
    cfg.dropout = j.contains("lora_dropout") && !j["lora_dropout"].is_null()
                      ? j["lora_dropout"].get<double>()
                      : 0.0;
    cfg.use_rslora = j.value("use_rslora", false);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  const json& t = j.contains("target_modules") ? j["target_modules"] : json();
  if (t.is_array()) {
    cfg.target_modules = t.get<std::vector<std::string>>();
  } else if (t.is_string() && t.get<std::string>() == "all-linear") {
    // Every linear layer of the model it is loaded into; PEFT's all-linear leaves a mixture of
    // experts' stacks to target_parameters.
    for (const auto& name : model::all_linear_targets(model_config))
      if (name.rfind("experts.", 0) != 0) cfg.target_modules.push_back(name);
  } else {
    cfg.target_modules = targets_from_tensors(weights);
  }
  cfg.rank_pattern = read_pattern<int>(j, "rank_pattern", path);
  cfg.alpha_pattern = read_pattern<double>(j, "alpha_pattern", path);
  // PEFT's target_parameters ("mlp.experts.gate_up_proj"): our expert stacks go by those names.
  cfg.target_parameters.emplace();
  if (set_and_truthy(j, "target_parameters")) {
    if (!j["target_parameters"].is_array())
      fail(path, "target_parameters", "expected a list of parameter names");
    for (const auto& p : j["target_parameters"]) {
      if (!p.is_string()) fail(path, "target_parameters", "expected strings, got " + p.dump());
      cfg.target_parameters->push_back(p.get<std::string>());
    }
  }
  return cfg;
}

// Whether `target` names a linear layer of `model` (not an expert stack).
bool names_linear_layer(model::CausalLM& model, const std::string& target) {
  for (const auto& item : model->named_modules())
    if (std::dynamic_pointer_cast<model::LinearImpl>(item.value()) &&
        model::matches_target(item.key(), target))
      return true;
  return false;
}

}  // namespace

void save_peft_adapter(model::CausalLM& model, const model::LoraConfig& cfg,
                       const std::string& base_model_name_or_path, const std::string& out_dir) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : model->named_parameters())
    if (is_lora_name(item.key()))
      tensors.emplace_back(kPrefix + model::peft_tensor_name(model, item.key()), item.value());
  if (tensors.empty())
    throw std::runtime_error(out_dir + ": the model has no LoRA adapters to save");
  fs::create_directories(out_dir);
  // target_modules: the targets that name linear layers; a mixture of experts' stacks are PEFT's
  // target_parameters, their ranks in rank_pattern (lora.h: resolved_for).
  const model::LoraConfig resolved = model::resolved_for(cfg, model->config());
  std::vector<std::string> targets;
  for (const auto& t : resolved.target_modules.empty() && !resolved.target_parameters
                           ? model::all_linear_targets(model->config())
                           : resolved.target_modules)
    if (names_linear_layer(model, t)) targets.push_back(t);
  std::sort(targets.begin(), targets.end());
  // In a multimodal model the same names are also the vision tower's layers: PEFT matches a
  // string against each whole module name, which keeps the adapter to the language model.
  json target_modules = targets;
  if (model->config().wrapped_in_multimodal()) {
    std::string alternatives;
    for (const auto& t : targets) alternatives += (alternatives.empty() ? "" : "|") + t;
    target_modules = "model\\.language_model\\..*\\.(" + alternatives + ")";
  }
  const std::vector<std::string> parameters = model::adapted_expert_stacks(model);
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"r", cfg.r},
                 {"lora_alpha", cfg.alpha},
                 {"lora_dropout", cfg.dropout},
                 {"target_modules", target_modules},
                 {"target_parameters", parameters.empty() ? json(nullptr) : json(parameters)},
                 {"bias", "none"},
                 {"use_rslora", cfg.use_rslora},
                 {"use_dora", false},
                 {"fan_in_fan_out", false},
                 {"init_lora_weights", true},
                 {"modules_to_save", nullptr},
                 {"layers_to_transform", nullptr},
                 {"rank_pattern", pattern_json(resolved.rank_pattern)},
                 {"alpha_pattern", pattern_json(resolved.alpha_pattern)},
                 {"base_model_name_or_path", base_model_name_or_path},
                 {"inference_mode", true},
                 {"revision", nullptr}};
  save_safetensors(out_dir + "/adapter_model.safetensors", tensors, {{"format", "pt"}});
  const std::string path = out_dir + "/adapter_config.json";
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << config.dump(2);
    if (!out) throw std::runtime_error(path + ".tmp: write failed");
  }
  fs::rename(path + ".tmp", path);
}

model::LoraConfig load_peft_adapter(model::CausalLM& model, const std::string& dir) {
  if (!fs::is_directory(dir)) throw std::runtime_error(dir + ": adapter directory does not exist");
  const std::string weights_path = dir + "/adapter_model.safetensors";
  if (!fs::exists(weights_path) && fs::exists(dir + "/adapter_model.bin"))
    throw std::runtime_error(dir +
                             ": only safetensors adapters are supported (found adapter_model.bin)");
  SafetensorsFile weights(weights_path);
  model::LoraConfig cfg = read_config(dir + "/adapter_config.json", weights, model->config());
  model::apply_lora(model, cfg, /*seed=*/0);  // every adapter weight is overwritten below

  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  for (auto& item : params) {
    if (!is_lora_name(item.key())) continue;
    const std::string name = kPrefix + model::peft_tensor_name(model, item.key());
    if (!weights.contains(name))
      throw std::runtime_error(weights_path + ": tensor \"" + name + "\" is missing");
    at::Tensor src = weights.tensor(name);
    if (src.sizes() != item.value().sizes())
      throw std::runtime_error(weights_path + ": tensor \"" + name + "\" has shape " +
                               c10::str(src.sizes()) + " but the model expects " +
                               c10::str(item.value().sizes()));
    item.value().copy_(src);
  }
  // A tensor we did not use means the adapter targets something our model does not have.
  std::set<std::string> ours_in_peft_names;
  for (const auto& item : params)
    if (is_lora_name(item.key()))
      ours_in_peft_names.insert(kPrefix + model::peft_tensor_name(model, item.key()));
  for (const auto& n : weights.names()) {
    bool ours = ours_in_peft_names.count(n) > 0;
    if (!ours)
      throw std::runtime_error(weights_path + ": tensor \"" + n +
                               "\" matches no LoRA layer of the model");
  }
  return cfg;
}

}  // namespace kubetune::io
