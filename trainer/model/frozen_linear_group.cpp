#include "trainer/model/frozen_linear_group.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>

#include <optional>

#include "kernels/quant4.h"
#include "kernels/swiglu.h"
#include "trainer/model/fp8_linear.h"

namespace kubetune::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Slots per layer in the saved tensors: weight, bias, lora A, lora B, x A^T.
constexpr size_t kSlots = 5;

// The dtype the products run in: autocast's, as for the plain layers, else the input's.
at::ScalarType product_dtype(const Tensor& x) {
  const auto device = x.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                   : x.scalar_type();
}

// One layer's tensors in the product dtype. a and b are undefined without an adapter. A 4-bit
// (QLoRA) weight stays packed and is dequantized for each product, forward and backward, as
// trainer/model/linear_4bit does. Under model.precision fp8 the base product is the layer's
// FP8 one (trainer/model/fp8_linear.h) and `weight` stays undefined.
struct Member {
  Tensor weight, bias, a, b, xa;  // xa = x A^T, [tokens, r], kept for B's gradient
  double scaling = 0;
  // Owned by the layer, which outlives the graph.
  const kernels::Quant4State* quant = nullptr;
  const LinearImpl* fp8 = nullptr;
  int64_t out = 0;  // out_features
  bool has_lora() const { return a.defined(); }
  int64_t out_features() const { return out; }
  Tensor dense_weight(at::ScalarType dtype) const {
    return quant ? kernels::dequantize_4bit(*quant, dtype) : weight;
  }
};

// The layers' tensors, with the adapters taken from `adapters` (their autograd inputs), in order.
std::vector<Member> members_of(const std::vector<LinearImpl*>& linears, torch::TensorList adapters,
                               at::ScalarType dtype) {
  std::vector<Member> out;
  size_t k = 0;
  for (auto* l : linears) {
    Member m;
    m.out = l->out_features();
    if (l->uses_fp8())
      m.fp8 = l;
    else if (l->is_quantized())
      m.quant = &l->quantized();
    else
      m.weight = l->weight.to(dtype);
    if (l->bias.defined()) m.bias = l->bias.to(dtype);
    if (l->has_lora()) {
      m.a = adapters[k++].to(dtype);
      m.b = adapters[k++].to(dtype);
      m.scaling = l->lora_scaling();
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<Tensor> adapters_of(const std::vector<LinearImpl*>& linears) {
  std::vector<Tensor> out;
  for (auto* l : linears)
    if (l->has_lora()) {
      out.push_back(l->lora_A());
      out.push_back(l->lora_B());
    }
  return out;
}

// x W^T (+ b): in FP8 from `x2_fp8` (x2 quantized, shared by the group; made here when not
// given), else in x2's dtype.
Tensor base_product(const Tensor& x2, const Member& m, const kernels::Fp8Rows* x2_fp8) {
  if (m.fp8) {
    const Tensor y = fp8_forward_product(x2_fp8 ? *x2_fp8 : kernels::quantize_rows_fp8(x2),
                                         m.fp8->fp8_base(), x2.scalar_type());
    return m.bias.defined() ? y.add_(m.bias) : y;
  }
  const Tensor w = m.dense_weight(x2.scalar_type());
  return m.bias.defined() ? at::addmm(m.bias, x2, w.t()) : at::mm(x2, w.t());
}

// The group's input in FP8 once for all its members, when any of them takes it.
std::optional<kernels::Fp8Rows> shared_fp8_input(const Tensor& x2,
                                                 const std::vector<Member>& members) {
  for (const auto& m : members)
    if (m.fp8) return kernels::quantize_rows_fp8(x2);
  return std::nullopt;
}

// y = x W^T + b + scaling (x A^T) B^T, the LoRA sum in the GEMM's epilogue.
Tensor member_forward(const Tensor& x2, Member& m, const kernels::Fp8Rows* x2_fp8 = nullptr) {
  Tensor y = base_product(x2, m, x2_fp8);
  if (m.has_lora()) {
    m.xa = at::mm(x2, m.a.t());
    y.addmm_(m.xa, m.b.t(), /*beta=*/1, /*alpha=*/m.scaling);
  }
  return y;
}

// alpha a b in one GEMM, written in `dtype` (beta = 0: the output's initial contents are not
// read). One kernel where a product, a scaling and a cast were three: a step runs this four times
// per adapter, and on Llama-3.1-8B the step's ~5900 kernels cost about 1.7 us each between them.
Tensor scaled_mm(const Tensor& a, const Tensor& b, double alpha, at::ScalarType dtype) {
  Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(dtype));
  if (dtype == a.scalar_type()) return at::addmm(out, a, b, /*beta=*/0, alpha);
  return at::addmm(out, a, b, dtype, /*beta=*/0, alpha);  // fp32 out of bf16 inputs
}

// dX += dY W (the first layer writes dX), and for an adapter dX += t A with t = scaling dY B,
// which is returned for the adapter's gradients.
Tensor add_input_gradient(const Tensor& dy, const Member& m, bool need_x, Tensor& dx) {
  if (need_x && m.fp8) {
    // _scaled_mm has no beta: the FP8 product is added, one pass over dX.
    Tensor part = fp8_input_gradient(dy, m.fp8->fp8_base(), dy.scalar_type());
    dx = dx.defined() ? dx.add_(part) : part;
  } else if (need_x) {
    const Tensor w = m.dense_weight(dy.scalar_type());
    dx = dx.defined() ? dx.addmm_(dy, w) : at::mm(dy, w);
  }
  if (!m.has_lora()) return {};
  Tensor t = scaled_mm(dy, m.b, m.scaling, dy.scalar_type());
  if (need_x) dx.addmm_(t, m.a);
  return t;
}

// d A = t^T x, d B = scaling dY^T (x A^T), written in the adapters' own dtype (fp32 out of the
// bf16 products' accumulator, where PEFT under autocast rounds them to bf16 first).
void add_adapter_gradients(const Tensor& dy, const Tensor& x2, const Tensor& t, const Member& m,
                           at::ScalarType adapter_dtype, variable_list& out) {
  out.push_back(scaled_mm(t.t(), x2, 1.0, adapter_dtype));
  out.push_back(scaled_mm(dy.t(), m.xa, m.scaling, adapter_dtype));
}

void save(AutogradContext* ctx, const Tensor& x2, const std::vector<Tensor>& extra,
          const std::vector<Member>& members, const Tensor& x, torch::TensorList adapters) {
  variable_list saved{x2};
  saved.insert(saved.end(), extra.begin(), extra.end());
  std::vector<double> scalings;
  std::vector<int64_t> quants, fp8s, outs;
  for (const auto& m : members) {
    saved.insert(saved.end(), {m.weight, m.bias, m.a, m.b, m.xa});
    scalings.push_back(m.scaling);
    quants.push_back(reinterpret_cast<int64_t>(m.quant));
    fp8s.push_back(reinterpret_cast<int64_t>(m.fp8));
    outs.push_back(m.out);
  }
  ctx->saved_data["quants"] = quants;
  ctx->saved_data["fp8s"] = fp8s;
  ctx->saved_data["outs"] = outs;
  ctx->save_for_backward(saved);
  ctx->saved_data["scalings"] = scalings;
  ctx->saved_data["x_sizes"] = x.sizes().vec();
  ctx->saved_data["extra"] = static_cast<int64_t>(extra.size());
  ctx->saved_data["adapter_dtype"] =
      static_cast<int64_t>(adapters.empty() ? x.scalar_type() : adapters.front().scalar_type());
}

struct Saved {
  Tensor x2;
  std::vector<Tensor> extra;
  std::vector<Member> members;
  std::vector<int64_t> x_sizes;
  at::ScalarType adapter_dtype;
};

Saved restore(AutogradContext* ctx) {
  Saved s;
  auto saved = ctx->get_saved_variables();
  const auto extra = static_cast<size_t>(ctx->saved_data["extra"].toInt());
  const auto scalings = ctx->saved_data["scalings"].toDoubleVector();
  const auto quants = ctx->saved_data["quants"].toIntVector();
  const auto fp8s = ctx->saved_data["fp8s"].toIntVector();
  const auto outs = ctx->saved_data["outs"].toIntVector();
  s.x2 = saved[0];
  s.extra.assign(saved.begin() + 1, saved.begin() + 1 + static_cast<std::ptrdiff_t>(extra));
  for (size_t i = 0; i < scalings.size(); ++i) {
    const size_t at = 1 + extra + i * kSlots;
    s.members.push_back({saved[at], saved[at + 1], saved[at + 2], saved[at + 3], saved[at + 4],
                         scalings[i], reinterpret_cast<const kernels::Quant4State*>(quants[i]),
                         reinterpret_cast<const LinearImpl*>(fp8s[i]), outs[i]});
  }
  s.x_sizes = ctx->saved_data["x_sizes"].toIntVector();
  s.adapter_dtype = static_cast<at::ScalarType>(ctx->saved_data["adapter_dtype"].toInt());
  return s;
}

std::vector<int64_t> with_last(std::vector<int64_t> sizes, int64_t last) {
  sizes.back() = last;
  return sizes;
}

struct GroupFunction : public torch::autograd::Function<GroupFunction> {
  static variable_list forward(AutogradContext* ctx, const Tensor& x, torch::TensorList adapters,
                               const std::vector<LinearImpl*>& linears) {
    const auto dtype = product_dtype(x);
    const Tensor x2 = x.reshape({-1, x.size(-1)}).to(dtype);
    auto members = members_of(linears, adapters, dtype);
    const auto x2_fp8 = shared_fp8_input(x2, members);
    variable_list out;
    for (auto& m : members)
      out.push_back(member_forward(x2, m, x2_fp8 ? &*x2_fp8 : nullptr)
                        .view(with_last(x.sizes().vec(), m.out_features())));
    save(ctx, x2, {}, members, x, adapters);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Saved s = restore(ctx);
    const bool need_x = ctx->needs_input_grad(0);
    Tensor dx;
    variable_list adapter_grads;
    for (size_t i = 0; i < s.members.size(); ++i) {
      const Member& m = s.members[i];
      if (!grads[i].defined()) {  // an output nobody used: no gradient from it
        if (m.has_lora()) adapter_grads.insert(adapter_grads.end(), {Tensor(), Tensor()});
        continue;
      }
      const Tensor dy = grads[i].reshape({-1, m.out_features()}).to(s.x2.scalar_type());
      const Tensor t = add_input_gradient(dy, m, need_x, dx);
      if (m.has_lora()) add_adapter_gradients(dy, s.x2, t, m, s.adapter_dtype, adapter_grads);
    }
    variable_list out{dx.defined() ? dx.view(s.x_sizes) : Tensor()};
    out.insert(out.end(), adapter_grads.begin(), adapter_grads.end());
    out.push_back(Tensor());  // linears
    return out;
  }
};

struct SwigluMlpFunction : public torch::autograd::Function<SwigluMlpFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, torch::TensorList adapters,
                        const std::vector<LinearImpl*>& linears) {  // gate, up, down
    const auto dtype = product_dtype(x);
    const Tensor x2 = x.reshape({-1, x.size(-1)}).to(dtype);
    auto members = members_of(linears, adapters, dtype);
    const auto x2_fp8 = shared_fp8_input(x2, {members[0], members[1]});
    const kernels::Fp8Rows* shared = x2_fp8 ? &*x2_fp8 : nullptr;
    Tensor gate = member_forward(x2, members[0], shared),
           up = member_forward(x2, members[1], shared);
    Tensor y = member_forward(kernels::swiglu_forward_op(gate, up), members[2]);
    save(ctx, x2, {gate, up}, members, x, adapters);
    return y.view(with_last(x.sizes().vec(), y.size(-1)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Saved s = restore(ctx);
    const Member &gate = s.members[0], &up = s.members[1], &down = s.members[2];
    const Tensor dy = grads[0].reshape({-1, down.out_features()}).to(s.x2.scalar_type());
    Tensor d_hidden;
    const Tensor t_down = add_input_gradient(dy, down, /*need_x=*/true, d_hidden);
    // SwiGLU's output is recomputed here instead of kept from forward.
    auto [d_gate, d_up, hidden] =
        kernels::swiglu_backward_with_output(d_hidden, s.extra[0], s.extra[1]);
    d_hidden = Tensor();
    const bool need_x = ctx->needs_input_grad(0);
    Tensor dx;
    variable_list adapter_grads;
    const Tensor t_gate = add_input_gradient(d_gate, gate, need_x, dx);
    if (gate.has_lora())
      add_adapter_gradients(d_gate, s.x2, t_gate, gate, s.adapter_dtype, adapter_grads);
    const Tensor t_up = add_input_gradient(d_up, up, need_x, dx);
    if (up.has_lora()) add_adapter_gradients(d_up, s.x2, t_up, up, s.adapter_dtype, adapter_grads);
    if (down.has_lora())
      add_adapter_gradients(dy, hidden, t_down, down, s.adapter_dtype, adapter_grads);
    variable_list out{dx.defined() ? dx.view(s.x_sizes) : Tensor()};
    out.insert(out.end(), adapter_grads.begin(), adapter_grads.end());
    out.push_back(Tensor());  // linears
    return out;
  }
};

}  // namespace

bool can_group(const Tensor& x, const std::vector<LinearImpl*>& linears, bool require_cuda) {
  if (require_cuda && !x.is_cuda()) return false;
  for (auto* l : linears) {
    if (l->weight.requires_grad() || l->lora_dropout() > 0) return false;
    // A 4-bit layer whose compute dtype is not the products' keeps its own path.
    if (l->is_quantized() && l->quantized_compute_dtype() != product_dtype(x)) return false;
    if (l->bias.defined() && l->bias.requires_grad()) return false;
  }
  return true;
}

std::vector<Tensor> frozen_linear_group(const Tensor& x, const std::vector<LinearImpl*>& linears) {
  // A TensorList (not a vector) so that autograd sees each adapter as an input of its own.
  const auto adapters = adapters_of(linears);
  return GroupFunction::apply(x, torch::TensorList(adapters), linears);
}

Tensor frozen_swiglu_mlp(const Tensor& x, LinearImpl& gate, LinearImpl& up, LinearImpl& down) {
  const std::vector<LinearImpl*> linears{&gate, &up, &down};
  const auto adapters = adapters_of(linears);
  return SwigluMlpFunction::apply(x, torch::TensorList(adapters), linears);
}

}  // namespace kubetune::model
