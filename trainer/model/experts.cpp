#include "trainer/model/experts.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/utils.h>

#include <stdexcept>

#include "kernels/clamped_swiglu.h"
#include "kernels/swiglu.h"
#include "trainer/model/linear_4bit.h"

namespace kubetune::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// LibTorch's grouped GEMM takes bf16 on the GPU with rows of a multiple of 16 bytes.
bool grouped_gemm_takes(const Tensor& x, const Tensor& w) {
  auto aligned = [](int64_t n) { return (n * 2) % 16 == 0; };
  return x.is_cuda() && x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16 &&
         aligned(w.size(1)) && aligned(w.size(2));
}

// The dtype the experts compute in: autocast's when it is on, else the input's.
torch::ScalarType compute_dtype_of(const Tensor& x) {
  const auto device = x.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                   : x.scalar_type();
}

// A 4-bit stack made whole in `type`: [E, out, in] from its [E * out, in] matrix.
Tensor dequantized_stack(const kernels::Quant4State& s, int64_t experts, torch::ScalarType type) {
  return kernels::dequantize_4bit(s, type).view({experts, -1, s.shape[1]});
}

// The frozen 4-bit stack, made whole in forward and again in backward (as linear_4bit.cpp does
// for one layer): only the input is kept for backward, never the [E, out, in] stack.
class GroupedLinear4bit : public torch::autograd::Function<GroupedLinear4bit> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& ends,
                        const kernels::Quant4State* s, int64_t experts, int64_t dtype) {
    save_quant4_for_backward(ctx, *s, {ends});
    ctx->saved_data["experts"] = experts;
    ctx->saved_data["dtype"] = dtype;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    const auto type = static_cast<torch::ScalarType>(dtype);
    return grouped_linear(x.to(type), dequantized_stack(*s, experts, type), ends);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const kernels::Quant4State s = restore_quant4(ctx);
    const Tensor ends = ctx->get_saved_variables()[3];
    const auto type = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const Tensor w = dequantized_stack(s, ctx->saved_data["experts"].toInt(), type);
    // dx = g W_e: the product with the transposed stack.
    const Tensor dx = grouped_linear(grads[0].to(type), w.transpose(1, 2), ends).to(x_dtype);
    return {dx, {}, {}, {}, {}};
  }
};

// out[i] = x[gather[i]], whose backward gathers too instead of scattering: x's gradient row n is
// the sum of the `uses` gradient rows back[n * uses .. n * uses + uses - 1]. LibTorch's
// index_select scatters its gradient with atomic adds (index_add), which took 14% of a
// Qwen3-30B-A3B LoRA step on an H100; a gather and a sum over the k take a fraction of that, and
// give the same sums in a fixed order.
class GatherRows : public torch::autograd::Function<GatherRows> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& gather,
                        const Tensor& back, int64_t uses) {
    ctx->save_for_backward({back});
    ctx->saved_data["uses"] = uses;
    return x.index_select(0, gather);
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const Tensor back = ctx->get_saved_variables()[0];
    const int64_t uses = ctx->saved_data["uses"].toInt();
    Tensor dx = grads[0].index_select(0, back);
    if (uses > 1) dx = dx.view({-1, uses, dx.size(-1)}).sum(1);
    return {dx, {}, {}, {}};
  }
};

}  // namespace

Tensor grouped_linear(const Tensor& x, const Tensor& w, const Tensor& ends, bool grouped) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2),
              "grouped_linear: x [S, in] and w [E, out, in] expected");
  if (grouped && grouped_gemm_takes(x, w)) return at::_grouped_mm(x, w.transpose(1, 2), ends);
  const Tensor host_ends = ends.to(at::kCPU, at::kLong);
  const auto* end = host_ends.data_ptr<int64_t>();
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t e = 0; e < w.size(0); ++e) {
    if (end[e] > start) parts.push_back(at::linear(x.narrow(0, start, end[e] - start), w[e]));
    start = end[e];
  }
  if (parts.empty()) return at::linear(x, w[0]);  // no row: [0, out]
  return parts.size() == 1 ? parts[0] : at::cat(parts);
}

Tensor grouped_linear_4bit(const Tensor& x, const kernels::Quant4State& w, int64_t experts,
                           torch::ScalarType compute_dtype, const Tensor& ends) {
  return GroupedLinear4bit::apply(x, ends, &w, experts, static_cast<int64_t>(compute_dtype));
}

Tensor ExpertLoraImpl::a_stack(int64_t experts, torch::ScalarType dtype) const {
  const Tensor& a = lora_A->weight;  // [r*E, in]
  return a.view({experts, -1, a.size(1)}).to(dtype);
}

Tensor ExpertLoraImpl::b_stack(int64_t experts, torch::ScalarType dtype, double scale) const {
  const Tensor& b = lora_B->weight;  // [out, r*E], column i*E + e
  return (b.view({b.size(0), -1, experts}).permute({2, 0, 1}) * scale).to(dtype).contiguous();
}

ExpertsImpl::ExpertsImpl(const ModelConfig& c, const torch::TensorOptions& opts)
    : experts_(c.num_experts),
      gelu_tanh_(c.gelu_tanh),
      interleaved_(c.family->experts.interleaved_gate_up),
      clamped_(c.family->experts.clamped_swiglu),
      alpha_(c.swiglu_alpha),
      limit_(c.swiglu_limit) {
  const int64_t h = c.hidden_size, i = c.expert_intermediate_size;
  gate_up_proj = register_parameter("gate_up_proj", new_parameter({experts_, 2 * i, h}, opts));
  down_proj = register_parameter("down_proj", new_parameter({experts_, h, i}, opts));
  if (c.family->experts.biases) {
    gate_up_proj_bias =
        register_parameter("gate_up_proj_bias", new_parameter({experts_, 2 * i}, opts));
    down_proj_bias = register_parameter("down_proj_bias", new_parameter({experts_, h}, opts));
  }
}

Tensor ExpertsImpl::activation(const Tensor& gate_up) const {
  if (clamped_) return kernels::clamped_swiglu(gate_up, alpha_, limit_);  // gpt-oss
  const int64_t i = gate_up.size(-1) / 2;
  const auto act = gelu_tanh_ ? kernels::GateActivation::kGeluTanh : kernels::GateActivation::kSilu;
  if (gate_up.is_cuda() && !interleaved_)  // the fused kernel reads both halves in place
    return kernels::gated_activation_packed(gate_up, act);
  const Tensor gate = interleaved_ ? gate_up.slice(-1, 0, 2 * i, 2) : gate_up.narrow(-1, 0, i);
  const Tensor up = interleaved_ ? gate_up.slice(-1, 1, 2 * i, 2) : gate_up.narrow(-1, i, i);
  return kernels::gated_reference(gate, up, act);
}

Tensor ExpertsImpl::product(const Tensor& rows, const Tensor& weight,
                            const kernels::Quant4State& quantized, const ExpertLora& lora,
                            const Tensor& ends) {
  const auto dtype = compute_dtype_of(rows);
  const Tensor x = rows.to(dtype);
  Tensor out = quantized.packed.defined()
                   ? grouped_linear_4bit(x, quantized, experts_, compute_dtype_, ends).to(dtype)
                   : grouped_linear(x, weight.to(dtype), ends);
  if (!lora) return out;
  const Tensor down = grouped_linear(x, lora->a_stack(experts_, dtype), ends);
  // The scaling goes into B's small copy, not over the [rows, out] product.
  return out + grouped_linear(down, lora->b_stack(experts_, dtype, lora->scaling), ends);
}

Tensor ExpertsImpl::forward(const Tensor& x, const Tensor& top_k_index,
                            const Tensor& top_k_weights) {
  const int64_t n = x.size(0), k = top_k_index.size(1);
  // Each (token, expert) pair as one row, sorted by expert; `ends` closes each expert's rows.
  const Tensor flat = top_k_index.reshape({-1});
  const Tensor order = std::get<1>(flat.sort(/*stable=*/std::optional<bool>(true), /*dim=*/0));
  const Tensor counts = at::zeros({experts_}, flat.options())
                            .scatter_add_(0, flat, at::ones_like(flat));  // no host sync
  const Tensor ends = counts.cumsum(0).to(at::kInt);
  // Sorted row i is (token, choice) pair order[i]; pair p's sorted row is inverse[p].
  const Tensor inverse =
      at::empty_like(order).scatter_(0, order, at::arange(order.numel(), order.options()));
  const Tensor rows = GatherRows::apply(x, order.div(k, "floor"), inverse, k);

  // Each sorted row's expert, for the stacks' biases.
  const Tensor row_experts = gate_up_proj_bias.defined() ? flat.index_select(0, order) : Tensor();
  Tensor gate_up = product(rows, gate_up_proj, gate_up_4bit_, gate_up_lora, ends);
  if (gate_up_proj_bias.defined())
    gate_up = gate_up + gate_up_proj_bias.index_select(0, row_experts).to(gate_up.scalar_type());
  Tensor hidden = activation(gate_up);
  // Each row's routing weight is applied before the down projection, which is linear, where
  // transformers applies it after (the same up to rounding): a pass over the [rows, I] tensor
  // instead of the wider [rows, hidden] one, and backward keeps no [rows, hidden] output for the
  // weights' gradient. The down projection's bias is weighted on its own.
  const Tensor weights = top_k_weights.reshape({-1}).index_select(0, order).unsqueeze(1);
  hidden = (hidden * weights).to(hidden.scalar_type());
  Tensor out = product(hidden, down_proj, down_4bit_, down_lora, ends);
  if (down_proj_bias.defined())
    out = out + (down_proj_bias.index_select(0, row_experts) * weights).to(out.scalar_type());
  // Back in token order, summed over the k.
  return GatherRows::apply(out, inverse, order, 1).view({n, k, -1}).sum(1).to(x.scalar_type());
}

std::vector<int64_t> ExpertsImpl::shape_of(const std::string& stack) const {
  const bool gate_up = stack == "gate_up_proj";
  const kernels::Quant4State& state = gate_up ? gate_up_4bit_ : down_4bit_;
  if (!state.packed.defined()) return (gate_up ? gate_up_proj : down_proj).sizes().vec();
  return {experts_, state.shape[0] / experts_, state.shape[1]};
}

void ExpertsImpl::add_lora(const std::string& stack, Tensor a, Tensor b, double scaling) {
  TORCH_CHECK(stack == "gate_up_proj" || stack == "down_proj", "no expert stack ", stack);
  ExpertLora lora(std::move(a), std::move(b), scaling);
  if (stack == "gate_up_proj") {
    TORCH_CHECK(!gate_up_lora, "gate_up_proj already has a LoRA adapter");
    gate_up_lora = register_module("gate_up_lora", lora);
  } else {
    TORCH_CHECK(!down_lora, "down_proj already has a LoRA adapter");
    down_lora = register_module("down_lora", lora);
  }
}

void ExpertsImpl::merge_lora() {
  torch::NoGradGuard no_grad;
  auto merge = [&](Tensor& weight, kernels::Quant4State& quantized, ExpertLora& lora,
                   const char* name) {
    if (!lora) return;
    if (quantized.packed.defined()) {
      weight.set_data(dequantized_stack(quantized, experts_, weight.scalar_type()));
      quantized = kernels::Quant4State();
    }
    const Tensor delta =
        at::bmm(lora->b_stack(experts_, at::kFloat, lora->scaling).to(weight.device()),
                lora->a_stack(experts_, at::kFloat).to(weight.device()));
    weight.copy_((weight.to(at::kFloat) + delta).to(weight.scalar_type()));
    unregister_module(name);
    lora = nullptr;
  };
  merge(gate_up_proj, gate_up_4bit_, gate_up_lora, "gate_up_lora");
  merge(down_proj, down_4bit_, down_lora, "down_lora");
}

int64_t ExpertsImpl::quantize_4bit(const std::string& type, int64_t blocksize, bool double_quant,
                                   torch::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  compute_dtype_ = compute_dtype;
  int64_t bytes = 0;
  for (auto [weight, state] :
       {std::pair{&gate_up_proj, &gate_up_4bit_}, {&down_proj, &down_4bit_}}) {
    if (state->packed.defined()) continue;
    *state = kernels::quantize_4bit(weight->detach().reshape({-1, weight->size(2)}), type,
                                    blocksize, double_quant);
    weight->set_data(torch::empty({0}, weight->options()));  // frees the full-precision copy
    bytes += state->bytes();
  }
  return bytes;
}

RouterImpl::RouterImpl(const ModelConfig& c, const torch::TensorOptions& opts)
    : top_k_(c.experts_per_token),
      normalize_(c.norm_topk_prob),
      weights_in_hidden_dtype_(c.family->experts.weights_in_hidden_dtype),
      softmax_over_top_k_(c.family->experts.softmax_over_top_k) {
  weight = register_parameter("weight", new_parameter({c.num_experts, c.hidden_size}, opts));
  if (c.family->experts.router_bias)
    bias = register_parameter("bias", new_parameter({c.num_experts}, opts));
}

RouterImpl::Routing RouterImpl::forward(const Tensor& x) {
  Routing r;
  r.logits = bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
  r.probs = at::softmax(r.logits, -1, at::kFloat);  // the load-balancing loss's, in every family
  if (softmax_over_top_k_) {  // gpt-oss: the top k logits, then a softmax over them alone
    auto [top, experts] = r.logits.topk(top_k_, -1);
    r.weights = at::softmax(top, -1);
    r.experts = experts;
    return r;
  }
  auto [top, experts] = r.probs.topk(top_k_, -1);
  if (normalize_) top = top / top.sum(-1, /*keepdim=*/true);
  r.weights = weights_in_hidden_dtype_ ? top.to(r.logits.scalar_type()) : top;
  r.experts = experts;
  return r;
}

SparseMoeImpl::SparseMoeImpl(const ModelConfig& c, const torch::TensorOptions& opts) {
  gate = register_module(c.family->experts.router, Router(c, opts));
  experts = register_module("experts", Experts(c, opts));
}

Tensor SparseMoeImpl::forward(const Tensor& x) {
  const Tensor flat = x.reshape({-1, x.size(-1)});
  RouterImpl::Routing r = gate->forward(flat);
  if (record) {
    const int64_t k = r.experts.size(1), n = flat.size(0);
    const Tensor real = record->token_mask.defined()
                            ? record->token_mask
                            : at::ones({n}, flat.options().dtype(at::kFloat));
    if (record->coefficient > 0) last_probability_sum = (r.probs * real.unsqueeze(-1)).sum(0);
    if (record->open) {
      torch::NoGradGuard no_grad;
      const Tensor counts =
          at::zeros({r.probs.size(1)}, real.options())
              .scatter_add_(0, r.experts.reshape({-1}), real.repeat_interleave(k));
      const Tensor tokens = real.sum();
      record->assignments = record->assignments.defined() ? record->assignments + counts : counts;
      record->assignments_since_taken = record->assignments_since_taken.defined()
                                            ? record->assignments_since_taken + counts
                                            : counts;
      record->rows = record->rows.defined() ? record->rows + tokens : tokens;
    }
    if (record->open && record->coefficient > 0)
      record->probability_sums.push_back(last_probability_sum);
  }
  return experts->forward(flat, r.experts, r.weights).view(x.sizes());
}

Tensor RoutingRecord::balance_term(const Tensor& probability_sum) const {
  const double experts = static_cast<double>(assignments.size(0));
  return (assignments / rows * (probability_sum / rows)).sum() *
         (experts * coefficient * loss_weight);
}

}  // namespace kubetune::model
