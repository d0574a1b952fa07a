#include "trainer/io/peft_adapter.h"

#include <ATen/ATen.h>
#include <torch/utils.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
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

model::LoraConfig read_config(const std::string& path, const SafetensorsFile& weights) {
  if (!std::ifstream(path))
    throw std::runtime_error(path + ": cannot open (is this a PEFT adapter folder?)");
  const json j = read_json_file_strict(path);
  if (j.value("peft_type", std::string("LORA")) != "LORA")
    fail(path, "peft_type", "only LORA adapters are supported");
  if (set_and_truthy(j, "use_dora")) fail(path, "use_dora", "DoRA is not supported");
  if (set_and_truthy(j, "fan_in_fan_out")) fail(path, "fan_in_fan_out", "not supported");
  for (const char* key : {"rank_pattern", "alpha_pattern", "modules_to_save", "layers_to_transform",
                          "layer_replication", "lora_bias", "exclude_modules", "target_parameters",
                          "trainable_token_indices", "use_qalora"})
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
    cfg.target_modules = {};  // every linear layer of the model it is loaded into
  } else {
    cfg.target_modules = targets_from_tensors(weights);
  }
  return cfg;
}

}  // namespace

void save_peft_adapter(model::CausalLM& model, const model::LoraConfig& cfg,
                       const std::string& base_model_name_or_path, const std::string& out_dir) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : model->named_parameters())
    if (is_lora_name(item.key())) tensors.emplace_back(kPrefix + item.key(), item.value());
  if (tensors.empty())
    throw std::runtime_error(out_dir + ": the model has no LoRA adapters to save");
  fs::create_directories(out_dir);
  std::vector<std::string> targets =
      cfg.target_modules.empty() ? model::all_linear_targets(model->config()) : cfg.target_modules;
  std::sort(targets.begin(), targets.end());
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"r", cfg.r},
                 {"lora_alpha", cfg.alpha},
                 {"lora_dropout", cfg.dropout},
                 {"target_modules", targets},
                 {"bias", "none"},
                 {"use_rslora", cfg.use_rslora},
                 {"use_dora", false},
                 {"fan_in_fan_out", false},
                 {"init_lora_weights", true},
                 {"modules_to_save", nullptr},
                 {"layers_to_transform", nullptr},
                 {"rank_pattern", json::object()},
                 {"alpha_pattern", json::object()},
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
  model::LoraConfig cfg = read_config(dir + "/adapter_config.json", weights);
  model::apply_lora(model, cfg, /*seed=*/0);  // every adapter weight is overwritten below

  torch::NoGradGuard no_grad;
  auto params = model->named_parameters();
  for (auto& item : params) {
    if (!is_lora_name(item.key())) continue;
    const std::string name = kPrefix + item.key();
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
  for (const auto& n : weights.names()) {
    bool ours = n.rfind(kPrefix, 0) == 0 && params.contains(n.substr(kPrefix.size()));
    if (!ours)
      throw std::runtime_error(weights_path + ": tensor \"" + n +
                               "\" matches no LoRA layer of the model");
  }
  return cfg;
}

}  // namespace kubetune::io
