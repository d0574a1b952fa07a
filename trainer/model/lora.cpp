#include "trainer/model/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "trainer/model/fp8_linear.h"
#include "trainer/model/layers.h"

namespace kubetune::model {
namespace {

std::string last_component(const std::string& name) {
  auto dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// Every LoRA-capable linear inside the decoder layers, keyed by its full module name.
std::vector<std::pair<std::string, std::shared_ptr<LinearImpl>>> decoder_linears(CausalLM& model) {
  std::vector<std::pair<std::string, std::shared_ptr<LinearImpl>>> out;
  for (const auto& item : model->named_modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(item.value());
    if (linear && item.key().rfind("model.layers.", 0) == 0) out.emplace_back(item.key(), linear);
  }
  return out;
}

}  // namespace

bool matches_target(const std::string& module, const std::string& target) {
  if (module == target) return true;
  return module.size() > target.size() &&
         module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

double LoraConfig::scaling() const { return use_rslora ? alpha / std::sqrt(r) : alpha / r; }

std::vector<std::string> all_linear_targets(const ModelConfig& config) {
  std::vector<std::string> out;
  for (const auto& linear : config.decoder_linears()) out.push_back(last_component(linear.module));
  return out;
}

void check_lora_targets(const ModelConfig& config, const std::vector<std::string>& targets) {
  const auto known = all_linear_targets(config);
  for (const auto& t : targets) {
    if (std::find(known.begin(), known.end(), last_component(t)) != known.end()) continue;
    std::string names;
    for (const auto& k : known) names += (names.empty() ? "" : " ") + k;
    throw std::runtime_error("lora: target module \"" + t + "\" is not a linear layer of a " +
                             std::string(config.family->display_name) + " decoder layer (" + names +
                             ")");
  }
}

void apply_lora(CausalLM& model, const LoraConfig& cfg, uint64_t seed) {
  if (cfg.r <= 0)
    throw std::runtime_error("lora: r must be positive, got " + std::to_string(cfg.r));
  if (cfg.dropout < 0 || cfg.dropout >= 1)
    throw std::runtime_error("lora: dropout must be in [0, 1), got " + std::to_string(cfg.dropout));
  check_lora_targets(model->config(), cfg.target_modules);
  const std::vector<std::string> targets =
      cfg.target_modules.empty() ? all_linear_targets(model->config()) : cfg.target_modules;
  if (has_lora(model)) throw std::runtime_error("lora: the model already has LoRA adapters");

  for (auto& p : model->parameters()) p.set_requires_grad(false);
  // Initialise on the CPU from our own generator: the same seed gives the same adapter on every
  // device and leaves the global RNG alone.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  std::vector<bool> used(targets.size(), false);
  for (auto& [name, linear] : decoder_linears(model)) {
    bool targeted = false;
    for (size_t i = 0; i < targets.size(); ++i)
      if (matches_target(name, targets[i])) targeted = used[i] = true;
    if (!targeted) continue;
    const int64_t out_f = linear->out_features(), in_f = linear->in_features();
    // kaiming_uniform_(a=sqrt(5)): gain = sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / fan_in).
    const double bound = std::sqrt(2.0 / 6.0) * std::sqrt(3.0 / static_cast<double>(in_f));
    at::Tensor a = at::empty({cfg.r, in_f}, at::kFloat).uniform_(-bound, bound, gen);
    at::Tensor b = at::zeros({out_f, cfg.r}, at::kFloat);
    auto dev = linear->weight.device();
    linear->add_lora(a.to(dev).set_requires_grad(true), b.to(dev).set_requires_grad(true),
                     cfg.scaling(), cfg.dropout);
  }
  for (size_t i = 0; i < targets.size(); ++i)
    if (!used[i])
      throw std::runtime_error("lora: target module \"" + targets[i] +
                               "\" matches no layer of the model");
}

void merge_lora(CausalLM& model) {
  for (auto& [name, linear] : decoder_linears(model)) linear->merge_lora();
}

int64_t quantize_linears(torch::nn::Module& part, const std::string& type, int64_t blocksize,
                         bool double_quant, torch::ScalarType compute_dtype) {
  int64_t bytes = 0;
  for (const auto& module : part.modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(module);
    if (!linear) continue;
    linear->quantize_4bit(type, blocksize, double_quant, compute_dtype);
    bytes += linear->quantized().bytes();
  }
  return bytes;
}

int64_t use_fp8_products(torch::nn::Module& part) {
  int64_t count = 0;
  for (const auto& module : part.modules()) {
    auto linear = std::dynamic_pointer_cast<LinearImpl>(module);
    if (linear && linear->use_fp8()) ++count;
  }
  for (const auto& module : part.modules()) {
    std::vector<std::vector<LinearImpl*>> groups;
    if (auto attention = std::dynamic_pointer_cast<AttentionImpl>(module))
      groups = attention->input_gradient_groups();
    else if (auto mlp = std::dynamic_pointer_cast<MLPImpl>(module))
      groups = mlp->input_gradient_groups();
    for (const auto& group : groups) keep_fp8_transposed(group);
  }
  return count;
}

bool has_lora(CausalLM& model) {
  for (auto& [name, linear] : decoder_linears(model))
    if (linear->has_lora()) return true;
  return false;
}

}  // namespace kubetune::model
