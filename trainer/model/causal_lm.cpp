#include "trainer/model/causal_lm.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/utils.h>

#include <cmath>
#include <map>
#include <utility>

#include "trainer/model/experts.h"
#include "trainer/model/frozen_linear_group.h"
#include "trainer/model/host_offload.h"
#include "trainer/model/rope.h"

namespace kubetune::model {

DecoderStackImpl::DecoderStackImpl(const ModelConfig& c, const torch::TensorOptions& opts) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, opts));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layers->push_back(DecoderLayer(c, opts, i));
  norm =
      register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps, opts, c.family->norm_weight));
}

CausalLMImpl::CausalLMImpl(const ModelConfig& config, const torch::TensorOptions& opts)
    : config_(config),
      inv_freq_(rope_inv_freq(config, config.rope)),
      local_inv_freq_(rope_inv_freq(config, config.local_rope)) {
  model = register_module("model", DecoderStack(config, opts));
  if (!config.tie_word_embeddings)
    lm_head =
        register_module("lm_head", Linear(config.hidden_size, config.vocab_size, false, opts));
  if (!opts.device().is_meta()) init_like_hf(*this, config.initializer_range);
  if (config.family->has_experts()) {
    routing_ = std::make_shared<RoutingRecord>();
    routing_->coefficient = config.router_aux_loss_coef;
    for (size_t i = 0; i < model->layers->size(); ++i)
      if (auto& moe = model->layers->ptr<DecoderLayerImpl>(i)->moe) moe->record = routing_;
  }
}

torch::Tensor CausalLMImpl::take_expert_tokens() {
  if (!routing_) return {};
  return std::exchange(routing_->assignments_since_taken, torch::Tensor());
}

torch::Tensor CausalLMImpl::router_loss(double weight) {
  if (!routing_ || routing_->coefficient <= 0 || routing_->probability_sums.empty()) return {};
  routing_->loss_weight = weight;
  torch::Tensor loss = routing_->balance_term(routing_->probability_sums[0]);
  for (size_t l = 1; l < routing_->probability_sums.size(); ++l)
    loss = loss + routing_->balance_term(routing_->probability_sums[l]);
  return loss;
}

void CausalLMImpl::set_recompute_offload(bool on) {
  offload_ = on ? std::make_shared<HostOffload>(config_.num_hidden_layers) : nullptr;
}

std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> CausalLMImpl::parts() {
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> out;
  out.emplace_back("model.embed_tokens", model->embed_tokens.ptr());
  for (size_t i = 0; i < model->layers->size(); ++i)
    out.emplace_back("model.layers." + std::to_string(i), model->layers->ptr(i));
  out.emplace_back("model.norm", model->norm.ptr());
  if (lm_head) out.emplace_back("lm_head", lm_head.ptr());
  return out;
}

torch::Tensor build_attention_mask(const torch::Tensor& segment_ids, int64_t batch, int64_t seq_len,
                                   int64_t sliding_window, const torch::Device& device) {
  if (!segment_ids.defined() && sliding_window <= 0) return {};
  torch::Tensor idx = at::arange(seq_len, at::TensorOptions().dtype(at::kLong).device(device));
  torch::Tensor query = idx.unsqueeze(1), key = idx.unsqueeze(0);
  torch::Tensor allowed = key <= query;
  // HF's sliding_window_overlay: kv_idx > q_idx - sliding_window.
  if (sliding_window > 0) allowed = allowed.logical_and(key > query - sliding_window);
  allowed = allowed.unsqueeze(0).expand({batch, seq_len, seq_len});
  if (segment_ids.defined()) {
    torch::Tensor seg = segment_ids.to(device);
    torch::Tensor same = seg.unsqueeze(2) == seg.unsqueeze(1);
    torch::Tensor real_key = (seg != 0).unsqueeze(1);
    torch::Tensor self = at::eye(seq_len, at::TensorOptions().dtype(at::kBool).device(device));
    allowed = allowed.logical_and(same).logical_and(real_key).logical_or(self);
  }
  return allowed.unsqueeze(1);
}

namespace {

torch::Tensor swap_rng_state(at::Generator& gen, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  torch::Tensor previous = gen.get_state();
  gen.set_state(state);
  return previous;
}

// Backward runs on autograd's own thread, where the caller's autocast (thread-local) is off. The
// recompute must run in the dtype the forward ran in: in fp32 it would be slower (fp32 GEMMs)
// and, with fp32 LoRA weights meeting bf16 activations, fail. So the forward's autocast state
// is saved with the layer and re-entered around the recompute, as torch.utils.checkpoint does.
class ReplayedAutocast {
 public:
  ReplayedAutocast(at::DeviceType device, bool enabled, at::ScalarType dtype)
      : device_(device),
        was_enabled_(at::autocast::is_autocast_enabled(device)),
        previous_dtype_(at::autocast::get_autocast_dtype(device)) {
    at::autocast::set_autocast_enabled(device_, enabled);
    at::autocast::set_autocast_dtype(device_, dtype);
  }
  ~ReplayedAutocast() {
    at::autocast::set_autocast_enabled(device_, was_enabled_);
    at::autocast::set_autocast_dtype(device_, previous_dtype_);
    // The cast weights of this layer are not needed once its gradients are computed.
    if (!was_enabled_) at::autocast::clear_cache();
  }
  ReplayedAutocast(const ReplayedAutocast&) = delete;
  ReplayedAutocast& operator=(const ReplayedAutocast&) = delete;

 private:
  at::DeviceType device_;
  bool was_enabled_;
  at::ScalarType previous_dtype_;
};

// Runs one decoder layer without keeping its activations and recomputes it during backward.
// The layer's trainable parameters are explicit inputs so that gradients flow to them even
// when `x` itself needs none (LoRA on a frozen embedding). The RNG state is replayed so that
// dropout draws the same mask twice. With `offload`, the input waits in host memory instead
// (HostOffload, slot `index`), and backward brings back the input of the layer below early.
struct RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               torch::TensorList params, DecoderLayerImpl* layer,
                               const AttentionInputs& in, HostOffload* offload, int64_t index) {
    if (offload)
      offload->store(index, x);
    else
      ctx->save_for_backward({x});
    // The layer and the offload outlive the autograd graph (they belong to the model), so raw
    // pointers are safe.
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["offload"] = reinterpret_cast<int64_t>(offload);
    ctx->saved_data["index"] = index;
    ctx->saved_data["cos"] = in.cos;
    ctx->saved_data["sin"] = in.sin;
    ctx->saved_data["has_mask"] = in.mask.defined();
    if (in.mask.defined()) ctx->saved_data["mask"] = in.mask;
    ctx->saved_data["window"] = in.window;
    ctx->saved_data["segmented"] = in.segmented;
    ctx->saved_data["n_params"] = static_cast<int64_t>(params.size());
    const at::DeviceType device = x.device().type();
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(device);
    ctx->saved_data["autocast_dtype"] =
        static_cast<int64_t>(at::autocast::get_autocast_dtype(device));
    at::Generator gen = at::globalContext().defaultGenerator(x.device());
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      ctx->saved_data["rng"] = gen.get_state();
    }
    return layer->forward(x, in);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto* offload = reinterpret_cast<HostOffload*>(ctx->saved_data["offload"].toInt());
    const int64_t index = ctx->saved_data["index"].toInt();
    torch::Tensor x = offload ? offload->take(index) : ctx->get_saved_variables()[0];
    if (offload) offload->prefetch(index - 1);  // arrives while this layer is recomputed
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    AttentionInputs in{ctx->saved_data["cos"].toTensor(), ctx->saved_data["sin"].toTensor(), {}};
    if (ctx->saved_data["has_mask"].toBool()) in.mask = ctx->saved_data["mask"].toTensor();
    in.window = ctx->saved_data["window"].toInt();
    in.segmented = ctx->saved_data["segmented"].toBool();
    const int64_t n_params = ctx->saved_data["n_params"].toInt();

    const bool need_x = ctx->needs_input_grad(0);
    torch::Tensor xd = x.detach().requires_grad_(need_x);
    torch::Tensor out, balance;
    {
      // Hold the generator lock only while swapping states: dropout inside forward takes it too.
      at::Generator gen = at::globalContext().defaultGenerator(x.device());
      torch::Tensor current = swap_rng_state(gen, ctx->saved_data["rng"].toTensor());
      torch::AutoGradMode grad_on(true);
      ReplayedAutocast autocast(
          x.device().type(), ctx->saved_data["autocast"].toBool(),
          static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt()));
      // The layer's output is only the root of the gradient below: its value is never read.
      MlpOutputNotRead output_not_read;
      out = layer->forward(xd, in);
      swap_rng_state(gen, current);
      // This layer's part of the router's load-balancing loss: its forward ran without a graph.
      if (layer->moe && layer->moe->record && layer->moe->record->loss_weight != 0)
        balance = layer->moe->record->balance_term(layer->moe->last_probability_sum);
    }
    std::vector<torch::Tensor> wrt;
    if (need_x) wrt.push_back(xd);
    for (const auto& p : layer->parameters())
      if (p.requires_grad()) wrt.push_back(p);
    TORCH_CHECK(static_cast<int64_t>(wrt.size()) == n_params + (need_x ? 1 : 0),
                "trainable parameters changed between forward and backward");
    std::vector<torch::Tensor> roots{out}, root_grads{grad_out[0]};
    if (balance.defined()) {
      roots.push_back(balance);
      root_grads.push_back(torch::ones_like(balance));
    }
    auto grads = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    if (!need_x) grads.insert(grads.begin(), torch::Tensor());
    grads.push_back({});  // layer pointer
    grads.push_back({});  // attention inputs
    grads.push_back({});  // offload
    grads.push_back({});  // index
    return grads;
  }
};

}  // namespace

torch::Tensor CausalLMImpl::hidden_states(const torch::Tensor& input_ids,
                                          const torch::Tensor& position_ids,
                                          const torch::Tensor& segment_ids) {
  TORCH_CHECK(input_ids.dim() == 2 && position_ids.sizes() == input_ids.sizes(),
              "input_ids and position_ids must both be [B,T]");
  TORCH_CHECK(!segment_ids.defined() || segment_ids.sizes() == input_ids.sizes(),
              "segment_ids must be [B,T] like input_ids");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  if (before_stage) before_stage(-1);
  torch::Tensor h = model->embed_tokens->forward(input_ids);
  // sqrt(hidden) as an fp32 scalar, then in h's dtype; a host scalar, which a GPU kernel takes as
  // an argument (a copy to the device would make the host wait for the GPU).
  if (config_.family->scaled_embedding)
    h = h * at::scalar_tensor(std::sqrt(static_cast<double>(config_.hidden_size)), at::kFloat)
                .to(h.scalar_type());

  forget_compute_copies();  // each layer refreshes its own once its weights are in place
  // cos and sin of each RoPE in use (the sliding layers' may differ), made once per forward.
  std::map<const Rope*, std::pair<torch::Tensor, torch::Tensor>> rotations;
  auto rotation = [&](const Rope& rope) -> const std::pair<torch::Tensor, torch::Tensor>& {
    auto it = rotations.find(&rope);
    if (it != rotations.end()) return it->second;
    torch::Tensor inv_freq = &rope == &config_.rope ? inv_freq_ : local_inv_freq_;
    if (rope_depends_on_length(rope))  // on the longest position in the batch
      inv_freq = rope_inv_freq(config_, rope, position_ids.max().item<int64_t>() + 1);
    return rotations[&rope] =
               rope_cos_sin(inv_freq, position_ids, h.scalar_type(), rope.attention_factor);
  };

  std::map<int64_t, torch::Tensor> masks;  // one per distinct window (0 = full attention)
  const bool checkpoint = recompute_ && torch::GradMode::is_enabled();
  if (routing_) {
    routing_->start(segment_ids.defined()
                        ? (segment_ids != 0).reshape({-1}).to(h.device(), at::kFloat)
                        : torch::Tensor());
  }
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const int64_t window = config_.window_for_layer(l);
    if (!masks.count(window))
      masks[window] = build_attention_mask(segment_ids, B, T, window, h.device());
    const auto& [cos, sin] = rotation(config_.rope_for_layer(l));
    AttentionInputs in{cos, sin, masks[window], window, segment_ids.defined()};
    auto* layer = model->layers->ptr<DecoderLayerImpl>(l).get();
    if (before_stage) before_stage(l);
    if (h.is_cuda()) layer->refresh_adapter_copies(product_dtype(h));
    if (!checkpoint) {
      h = layer->forward(h, in);
    } else {
      std::vector<torch::Tensor> trainable;
      for (const auto& p : layer->parameters())
        if (p.requires_grad()) trainable.push_back(p);
      // The last layer's input is needed first in backward: it stays on the GPU.
      const bool offload_this = offload_ && h.is_cuda() && l + 1 < config_.num_hidden_layers;
      h = RecomputedLayer::apply(h, torch::TensorList(trainable), layer, in,
                                 offload_this ? offload_.get() : nullptr, l);
    }
    if (after_layer) after_layer(l, h);
  }
  if (before_stage) before_stage(config_.num_hidden_layers);
  if (routing_) routing_->open = false;  // a layer recomputed in backward records nothing
  return model->norm->forward(h);
}

torch::Tensor CausalLMImpl::logits(const torch::Tensor& hidden) {
  return lm_head ? lm_head->forward(hidden) : at::linear(hidden, model->embed_tokens->weight);
}

torch::Tensor CausalLMImpl::forward(const torch::Tensor& input_ids,
                                    const torch::Tensor& position_ids,
                                    const torch::Tensor& segment_ids) {
  return logits(hidden_states(input_ids, position_ids, segment_ids));
}

torch::Tensor& CausalLMImpl::output_weight() {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

std::vector<std::pair<std::string, torch::Tensor>> quantized_tensors(
    const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto add = [&](const std::string& name, const kernels::Quant4State& q) {
    for (const auto& [suffix, t] : {std::pair{".packed", q.packed}, std::pair{".absmax", q.absmax},
                                    std::pair{".nested_absmax", q.nested_absmax}})
      if (t.defined()) out.emplace_back(name + suffix, t);
  };
  for (const auto& item : module.named_modules()) {
    if (const auto* linear = dynamic_cast<const LinearImpl*>(item.value().get())) {
      if (linear->is_quantized()) add(item.key(), linear->quantized());
    } else if (const auto* experts = dynamic_cast<const ExpertsImpl*>(item.value().get())) {
      if (experts->is_quantized())
        for (const auto& [stack, q] : experts->quantized_states())
          add(item.key() + "." + stack, *q);
    }
  }
  return out;
}

std::vector<torch::Tensor> product_operands(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& item : module.named_modules()) {
    if (const auto* linear = dynamic_cast<const LinearImpl*>(item.value().get())) {
      if (linear->weight.numel() > 0) out.push_back(linear->weight);  // not a 4-bit or FP8 base
    } else if (const auto* experts = dynamic_cast<const ExpertsImpl*>(item.value().get())) {
      for (const auto& stack : {experts->gate_up_proj, experts->down_proj})
        if (stack.defined() && stack.numel() > 0) out.push_back(stack);
    }
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> CausalLMImpl::quantized_tensors() {
  return model::quantized_tensors(*this);
}

}  // namespace kubetune::model
