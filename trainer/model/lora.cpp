#include "trainer/model/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

#include "trainer/model/experts.h"
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

// Every sparse layer's experts, keyed by full module name ("model.layers.0.mlp.experts").
std::vector<std::pair<std::string, std::shared_ptr<ExpertsImpl>>> expert_modules(CausalLM& model) {
  std::vector<std::pair<std::string, std::shared_ptr<ExpertsImpl>>> out;
  for (const auto& item : model->named_modules()) {
    auto experts = std::dynamic_pointer_cast<ExpertsImpl>(item.value());
    if (experts) out.emplace_back(item.key(), experts);
  }
  return out;
}

// kaiming_uniform_(a=sqrt(5)) over [rows, in], as nn.Linear initialises PEFT's lora_A: gain =
// sqrt(2 / (1 + 5)), bound = gain * sqrt(3 / fan_in).
at::Tensor lora_a_init(int64_t rows, int64_t in, at::Generator& gen) {
  const double bound = std::sqrt(2.0 / 6.0) * std::sqrt(3.0 / static_cast<double>(in));
  return at::empty({rows, in}, at::kFloat).uniform_(-bound, bound, gen);
}

bool targeted(const std::string& name, const std::vector<std::string>& targets,
              std::vector<bool>& used) {
  bool any = false;
  for (size_t i = 0; i < targets.size(); ++i)
    if (matches_target(name, targets[i])) any = used[i] = true;
  return any;
}

}  // namespace

bool matches_target(const std::string& module, const std::string& target) {
  if (module == target) return true;
  return module.size() > target.size() &&
         module.compare(module.size() - target.size(), target.size(), target) == 0 &&
         module[module.size() - target.size() - 1] == '.';
}

double LoraConfig::scaling() const { return use_rslora ? alpha / std::sqrt(r) : alpha / r; }

int LoraConfig::rank_of(const std::string& module) const {
  auto it = rank_pattern.find(last_component(module));
  return it == rank_pattern.end() ? r : it->second;
}

double LoraConfig::scaling_of(const std::string& module) const {
  auto it = alpha_pattern.find(last_component(module));
  const double a = it == alpha_pattern.end() ? alpha : it->second;
  const double rank = rank_of(module);
  return use_rslora ? a / std::sqrt(rank) : a / rank;
}

std::vector<std::string> all_linear_targets(const ModelConfig& config) {
  if (config.family->has_experts()) {  // the attention's, then one expert's linears
    std::vector<std::string> out;
    for (const auto& linear : config.decoder_linears(0))
      if (linear.module.rfind("self_attn.", 0) == 0) out.push_back(last_component(linear.module));
    const ExpertLayout& e = config.family->experts;
    if (e.interleaved_gate_up) {  // gpt-oss names only its fused stacks
      out.insert(out.end(), {"gate_up_proj", "down_proj"});
      return out;
    }
    for (const char* name : {e.gate, e.up, e.down}) out.push_back(name);
    return out;
  }
  std::vector<std::string> out;
  for (const auto& linear : config.decoder_linears()) out.push_back(last_component(linear.module));
  return out;
}

namespace {

// Which of a mixture of experts' linears a target's last name stands for: 'g'ate, 'u'p, 'd'own,
// 'f'used gate_up; 0 for another layer. Both the family's names and Llama's are taken (Mixtral's
// w1, w3, w2 or gate_proj, up_proj, down_proj), as PEFT maps both.
char expert_linear(const ExpertLayout& e, const std::string& last) {
  if (last == e.gate || last == "gate_proj") return 'g';
  if (last == e.up || last == "up_proj") return 'u';
  if (last == e.down || last == "down_proj") return 'd';
  if (last == "gate_up_proj") return 'f';
  return 0;
}

}  // namespace

LoraConfig resolved_for(const LoraConfig& cfg, const ModelConfig& config) {
  if (!config.family->has_experts() || cfg.target_parameters) return cfg;
  const ExpertLayout& e = config.family->experts;
  LoraConfig out = cfg;
  out.target_modules.clear();
  out.target_parameters.emplace();
  auto add_stack = [&](const std::string& name) {
    if (std::find(out.target_parameters->begin(), out.target_parameters->end(), name) ==
        out.target_parameters->end())
      out.target_parameters->push_back(name);
  };
  bool gate = false, up = false;
  for (const auto& t :
       cfg.target_modules.empty() ? all_linear_targets(config) : cfg.target_modules) {
    switch (expert_linear(e, last_component(t))) {
      case 'g':
        gate = true;
        break;
      case 'u':
        up = true;
        break;
      case 'd':
        add_stack("mlp.experts.down_proj");
        break;
      case 'f':
        add_stack("mlp.experts.gate_up_proj");
        break;
      default:
        out.target_modules.push_back(t);
    }
  }
  if (gate != up)
    throw std::runtime_error(std::string("lora: in a ") + config.family->display_name +
                             " the experts' " + e.gate + " and " + e.up +
                             " are one fused experts.gate_up_proj: target both or neither");
  if (gate) {  // as PEFT maps them: each keeps rank r and scaling alpha / r
    add_stack("mlp.experts.gate_up_proj");
    out.rank_pattern["gate_up_proj"] = 2 * cfg.r;
    out.alpha_pattern["gate_up_proj"] = 2 * cfg.alpha;
  }
  std::sort(out.target_parameters->begin(), out.target_parameters->end());
  return out;
}

void check_lora_targets(const ModelConfig& config, const std::vector<std::string>& targets) {
  std::vector<std::string> known = all_linear_targets(config);
  if (config.family->has_experts() && !config.family->experts.interleaved_gate_up)
    for (const char* name : {"gate_proj", "up_proj", "down_proj", "gate_up_proj"})
      if (std::find(known.begin(), known.end(), name) == known.end()) known.push_back(name);
  for (const auto& t : targets) {
    if (std::find(known.begin(), known.end(), last_component(t)) != known.end()) continue;
    std::string names;
    for (const auto& k : known) names += (names.empty() ? "" : " ") + k;
    throw std::runtime_error("lora: target module \"" + t + "\" is not a linear layer of a " +
                             std::string(config.family->display_name) + " decoder layer (" + names +
                             ")");
  }
}

void apply_lora(CausalLM& model, const LoraConfig& requested, uint64_t seed) {
  check_lora_targets(model->config(), requested.target_modules);
  const LoraConfig cfg = resolved_for(requested, model->config());
  if (cfg.r <= 0)
    throw std::runtime_error("lora: r must be positive, got " + std::to_string(cfg.r));
  if (cfg.dropout < 0 || cfg.dropout >= 1)
    throw std::runtime_error("lora: dropout must be in [0, 1), got " + std::to_string(cfg.dropout));
  // Linear layers by target_modules (none: all of them, unless the stacks are named apart);
  // a mixture of experts' stacks by target_parameters.
  std::vector<std::string> for_linears = cfg.target_modules;
  if (for_linears.empty() && !cfg.target_parameters)
    for_linears = all_linear_targets(model->config());
  const std::vector<std::string> for_stacks =
      cfg.target_parameters.value_or(std::vector<std::string>{});
  check_lora_targets(model->config(), for_stacks);
  if (has_lora(model)) throw std::runtime_error("lora: the model already has LoRA adapters");

  for (auto& p : model->parameters()) p.set_requires_grad(false);
  // Initialise on the CPU from our own generator: the same seed gives the same adapter on every
  // device and leaves the global RNG alone.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard no_grad;
  std::vector<bool> used_by_linears(for_linears.size(), false);
  std::vector<bool> used_by_stacks(for_stacks.size(), false);
  for (auto& [name, linear] : decoder_linears(model)) {
    if (!targeted(name, for_linears, used_by_linears)) continue;
    const int64_t out_f = linear->out_features(), in_f = linear->in_features();
    const int rank = cfg.rank_of(name);
    at::Tensor a = lora_a_init(rank, in_f, gen);
    at::Tensor b = at::zeros({out_f, rank}, at::kFloat);
    auto dev = linear->weight.device();
    linear->add_lora(a.to(dev).set_requires_grad(true), b.to(dev).set_requires_grad(true),
                     cfg.scaling_of(name), cfg.dropout);
  }
  // Expert stacks as PEFT's target_parameters adapt them: one [r, in] and [out, r] per expert,
  // in A [r*E, in] and B [out, r*E] (experts.h: ExpertLora).
  for (auto& [name, experts] : expert_modules(model)) {
    for (const char* stack : {"gate_up_proj", "down_proj"}) {
      if (!targeted(name + "." + stack, for_stacks, used_by_stacks)) continue;
      if (cfg.dropout > 0)
        throw std::runtime_error("lora: dropout must be 0 on expert stacks (" + name + "." + stack +
                                 "), as in PEFT's target_parameters");
      const at::Tensor& w =
          stack == std::string("gate_up_proj") ? experts->gate_up_proj : experts->down_proj;
      const auto shape = experts->shape_of(stack);  // a 4-bit stack's weight is empty
      const int64_t e = shape[0], in_f = shape[2], out_f = shape[1];
      const int rank = cfg.rank_of(stack);
      at::Tensor a = lora_a_init(rank * e, in_f, gen);
      at::Tensor b = at::zeros({out_f, rank * e}, at::kFloat);
      auto dev = w.device();
      experts->add_lora(stack, a.to(dev).set_requires_grad(true), b.to(dev).set_requires_grad(true),
                        cfg.scaling_of(stack));
    }
  }
  auto check_used = [](const std::vector<std::string>& targets, const std::vector<bool>& used) {
    for (size_t i = 0; i < targets.size(); ++i)
      if (!used[i])
        throw std::runtime_error("lora: target module \"" + targets[i] +
                                 "\" matches no layer of the model");
  };
  check_used(for_linears, used_by_linears);
  check_used(for_stacks, used_by_stacks);
}

void merge_lora(CausalLM& model) {
  for (auto& [name, linear] : decoder_linears(model)) linear->merge_lora();
  for (auto& [name, experts] : expert_modules(model)) experts->merge_lora();
}

int64_t quantize_linears(torch::nn::Module& part, const std::string& type, int64_t blocksize,
                         bool double_quant, torch::ScalarType compute_dtype) {
  int64_t bytes = 0;
  for (const auto& module : part.modules()) {
    if (auto experts = std::dynamic_pointer_cast<ExpertsImpl>(module))
      bytes += experts->quantize_4bit(type, blocksize, double_quant, compute_dtype);
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
  for (auto& [name, experts] : expert_modules(model))
    if (experts->has_lora()) return true;
  return false;
}

namespace {

std::string peft_tensor_name_in_language_model(CausalLM& model, const std::string& name) {
  // model.layers.0.mlp.experts.gate_up_lora.lora_A.weight: PEFT wraps the experts module once
  // per adapted stack, down_proj outermost, so with both adapted gate_up's factors sit under
  // base_layer (observed with peft 0.21; tests/model/make_fixtures.py checks it).
  for (const char* stack : {".gate_up_lora.", ".down_lora."}) {
    const auto at = name.find(stack);
    if (at == std::string::npos) continue;
    const std::string module = name.substr(0, at), factor = name.substr(at + std::strlen(stack));
    bool down_adapted = false;
    for (auto& [n, experts] : expert_modules(model))
      if (n == module) down_adapted = static_cast<bool>(experts->down_lora);
    const bool inner = std::string(stack) == ".gate_up_lora." && down_adapted;
    return module + (inner ? ".base_layer." : ".") + factor;
  }
  return name;
}

}  // namespace

std::string peft_tensor_name(CausalLM& model, const std::string& name) {
  const std::string peft = peft_tensor_name_in_language_model(model, name);
  // A multimodal model's language model is model.language_model in transformers 5's modules.
  if (model->config().wrapped_in_multimodal() && peft.rfind("model.", 0) == 0)
    return "model.language_model." + peft.substr(6);
  return peft;
}

std::vector<std::string> adapted_expert_stacks(CausalLM& model) {
  std::set<std::string> out;  // sorted, each once
  for (auto& [name, experts] : expert_modules(model)) {
    if (experts->gate_up_lora) out.insert("mlp.experts.gate_up_proj");
    if (experts->down_lora) out.insert("mlp.experts.down_proj");
  }
  return {out.begin(), out.end()};
}

}  // namespace kubetune::model
