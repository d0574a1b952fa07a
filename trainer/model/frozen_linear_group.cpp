#include "trainer/model/frozen_linear_group.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "kernels/quant4.h"
#include "kernels/swiglu.h"
#include "kernels/swiglu_fp8.h"
#include "trainer/model/fp8_linear.h"

namespace kubetune::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Slots per layer in the saved tensors: weight, bias, lora A, lora B, x A^T.
constexpr size_t kSlots = 5;

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

// The layers' tensors, in order; the adapters in `dtype` from their layer's copies (made once per
// forward for the whole layer, adapter_copies.h), which autograd's inputs `adapters` are the
// weights of.
std::vector<Member> members_of(const std::vector<LinearImpl*>& linears, at::ScalarType dtype) {
  std::vector<Member> out;
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
      m.a = l->lora_A_as(dtype);
      m.b = l->lora_B_as(dtype);
      m.scaling = l->lora_scaling();
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<Member*> pointers_to(std::vector<Member>& members) {
  std::vector<Member*> out;
  for (auto& m : members) out.push_back(&m);
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
                                                 const std::vector<Member*>& members) {
  for (const auto* m : members)
    if (m->fp8) return kernels::quantize_rows_fp8(x2);
  return std::nullopt;
}

// alpha a b in one GEMM, written in `dtype` (beta = 0: the output's initial contents are not
// read). One kernel where a product, a scaling and a cast were three: a step runs this four times
// per adapter, and on Llama-3.1-8B the step's ~5900 kernels cost about 1.7 us each between them.
Tensor scaled_mm(const Tensor& a, const Tensor& b, double alpha, at::ScalarType dtype) {
  Tensor out = at::empty({a.size(0), b.size(1)}, a.options().dtype(dtype));
  if (dtype == a.scalar_type()) return at::addmm(out, a, b, /*beta=*/0, alpha);
  return at::addmm(out, a, b, dtype, /*beta=*/0, alpha);  // fp32 out of bf16 inputs
}

// x A^T for each of `members` with an adapter, all reading x2, as one GEMM over their ranks side
// by side (x2 [A_1; A_2; ...]^T): x2 is read once, not once per adapter. Each member's xa is its
// columns of the product.
void set_adapter_inputs(const Tensor& x2, const std::vector<Member*>& members) {
  std::vector<Tensor> a;
  for (const auto* m : members)
    if (m->has_lora()) a.push_back(m->a);
  if (a.empty()) return;
  const Tensor xa = at::mm(x2, (a.size() == 1 ? a[0] : at::cat(a, 0)).t());
  int64_t column = 0;
  for (auto* m : members)
    if (m->has_lora()) {
      m->xa = xa.narrow(1, column, m->a.size(0));
      column += m->a.size(0);
    }
}

// y = x W^T + b + scaling (x A^T) B^T, the LoRA sum in the GEMM's epilogue; x A^T is m.xa
// (set_adapter_inputs).
Tensor member_forward(const Tensor& x2, const Member& m, const kernels::Fp8Rows* x2_fp8 = nullptr) {
  if (m.fp8 && m.has_lora()) {
    // The adapter's part first; the FP8 product is added to it in its GEMM's epilogue.
    Tensor y = scaled_mm(m.xa, m.b.t(), m.scaling, x2.scalar_type());
    fp8_forward_product_add_(y, x2_fp8 ? *x2_fp8 : kernels::quantize_rows_fp8(x2),
                             m.fp8->fp8_base());
    return m.bias.defined() ? y.add_(m.bias) : y;
  }
  Tensor y = base_product(x2, m, x2_fp8);
  if (m.has_lora()) y.addmm_(m.xa, m.b.t(), /*beta=*/1, /*alpha=*/m.scaling);
  return y;
}

// The adapters' parts of dX, t A for each adapter (t = scaling dY B), gathered over a group's
// members and added as one GEMM over their ranks: [t1 t2 ...] [A1; A2; ...]. Each part added
// alone was a pass reading and writing all of dX for a product of rank 16 (on Llama-3.1-8B, 45 us
// of the q/k/v and gate/up backward's time each, three a layer).
struct AdapterInputGradients {
  std::vector<Tensor> t, a;
  bool empty() const { return t.empty(); }
  void add_to(Tensor& dx) const {
    if (t.empty()) return;
    if (t.size() == 1)
      dx.addmm_(t[0], a[0]);
    else
      dx.addmm_(at::cat(t, 1), at::cat(a, 0));
  }
  // Their sum alone, a new tensor.
  Tensor sum() const {
    return t.size() == 1 ? at::mm(t[0], a[0]) : at::mm(at::cat(t, 1), at::cat(a, 0));
  }
};

// dX += dY W (the first layer writes dX).
void add_base_input_gradient(const Tensor& dy, const Member& m, Tensor& dx) {
  if (m.fp8) {
    const std::vector<const LinearImpl*> base{m.fp8};
    if (dx.defined())
      fp8_group_input_gradient_add_(dx, fp8_group_output_gradients({dy}, base), base);
    else
      dx = fp8_input_gradient(dy, m.fp8->fp8_base_transposed(), dy.scalar_type());
  } else {
    const Tensor w = m.dense_weight(dy.scalar_type());
    dx = dx.defined() ? dx.addmm_(dy, w) : at::mm(dy, w);
  }
}

// The FP8 layers among `members` that have an output gradient, and those gradients; empty unless
// every member with a gradient is FP8.
std::pair<std::vector<const LinearImpl*>, std::vector<Tensor>> all_fp8_with_gradients(
    const std::vector<Tensor>& dys, const std::vector<const Member*>& members) {
  std::vector<const LinearImpl*> layers;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < members.size(); ++i) {
    if (!dys[i].defined()) continue;
    if (!members[i]->fp8) return {};
    layers.push_back(members[i]->fp8);
    grads.push_back(dys[i]);
  }
  return {layers, grads};
}

// dX = sum_i dY_i W_i + the adapters' parts. Where every layer with a gradient has an FP8 base and
// there is a sum to make (several layers, or adapters), the bases' parts are one FP8 GEMM of the
// gradients side by side (`quantized`, where the kernel that made them already quantized them as
// fp8_group_output_gradients does), added in its epilogue to the adapters' parts written first.
// Otherwise the bases' parts come one by one and the adapters' are added in theirs (cuBLAS,
// beta = 1).
Tensor input_gradient(const std::vector<Tensor>& dys, const std::vector<const Member*>& members,
                      const AdapterInputGradients& adapters,
                      const kernels::Fp8Rows* quantized = nullptr) {
  auto [fp8_layers, fp8_dys] = all_fp8_with_gradients(dys, members);
  if (!fp8_layers.empty() && (fp8_layers.size() > 1 || !adapters.empty() || quantized)) {
    const kernels::Fp8Rows dy =
        quantized ? *quantized : fp8_group_output_gradients(fp8_dys, fp8_layers);
    if (adapters.empty()) return fp8_group_input_gradient(dy, fp8_layers, fp8_dys[0].scalar_type());
    Tensor dx = adapters.sum();
    fp8_group_input_gradient_add_(dx, dy, fp8_layers);
    return dx;
  }
  Tensor dx;
  for (size_t i = 0; i < members.size(); ++i)
    if (dys[i].defined()) add_base_input_gradient(dys[i], *members[i], dx);
  adapters.add_to(dx);
  return dx;
}

// For an adapter, t = scaling dY B: returned for the adapter's gradients and, when `need_x`,
// kept in `pending` for dX += t A.
Tensor adapter_input_gradient(const Tensor& dy, const Member& m, bool need_x,
                              AdapterInputGradients& pending) {
  if (!m.has_lora()) return {};
  Tensor t = scaled_mm(dy, m.b, m.scaling, dy.scalar_type());
  if (need_x) {
    pending.t.push_back(t);
    pending.a.push_back(m.a);
  }
  return t;
}

// The adapters' gradients are written in their own dtype (fp32 out of the bf16 products'
// accumulator, where PEFT under autocast rounds them to bf16 first).
//
// d A_i = t_i^T x for adapters reading the same x (t_i undefined: none), as one GEMM over their
// ranks ([t_1 t_2 ...]^T x): x is read once, not once per adapter. Each d A_i is its rows.
std::vector<Tensor> adapter_a_gradients(const std::vector<Tensor>& ts, const Tensor& x,
                                        at::ScalarType adapter_dtype) {
  std::vector<Tensor> present;
  for (const auto& t : ts)
    if (t.defined()) present.push_back(t);
  std::vector<Tensor> out(ts.size());
  if (present.empty()) return out;
  const Tensor all = scaled_mm((present.size() == 1 ? present[0] : at::cat(present, 1)).t(), x, 1.0,
                               adapter_dtype);
  int64_t row = 0;
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].defined()) {
      out[i] = all.narrow(0, row, ts[i].size(1));
      row += ts[i].size(1);
    }
  return out;
}

// d B = scaling dY^T (x A^T).
Tensor adapter_b_gradient(const Tensor& dy, const Member& m, at::ScalarType adapter_dtype) {
  return scaled_mm(dy.t(), m.xa, m.scaling, adapter_dtype);
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
    auto members = members_of(linears, dtype);
    const auto x2_fp8 = shared_fp8_input(x2, pointers_to(members));
    set_adapter_inputs(x2, pointers_to(members));
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
    // An output nobody used has no gradient, and gives none.
    std::vector<Tensor> dys;
    std::vector<const Member*> members;
    for (size_t i = 0; i < s.members.size(); ++i) {
      members.push_back(&s.members[i]);
      dys.push_back(grads[i].defined()
                        ? grads[i].reshape({-1, s.members[i].out_features()}).to(s.x2.scalar_type())
                        : Tensor());
    }
    AdapterInputGradients adapters_dx;
    std::vector<Tensor> ts(s.members.size());
    for (size_t i = 0; i < s.members.size(); ++i)
      if (dys[i].defined())
        ts[i] = adapter_input_gradient(dys[i], s.members[i], need_x, adapters_dx);
    const Tensor dx = need_x ? input_gradient(dys, members, adapters_dx) : Tensor();
    const auto d_as = adapter_a_gradients(ts, s.x2, s.adapter_dtype);
    variable_list adapter_grads;
    for (size_t i = 0; i < s.members.size(); ++i) {
      if (!s.members[i].has_lora()) continue;
      adapter_grads.push_back(d_as[i]);  // both undefined for an output without a gradient
      adapter_grads.push_back(
          ts[i].defined() ? adapter_b_gradient(dys[i], s.members[i], s.adapter_dtype) : Tensor());
    }
    variable_list out{dx.defined() ? dx.view(s.x_sizes) : Tensor()};
    out.insert(out.end(), adapter_grads.begin(), adapter_grads.end());
    out.push_back(Tensor());  // linears
    return out;
  }
};

// The MLP node's members are gate, up and down, or (Phi-3) a fused gate_up_proj and down. The
// products before the activation are gate's and up's, or gate_up's alone: one [tokens, 2 x
// intermediate] tensor, gate's columns first, that the activation's kernels read in place (its
// gradient is written packed the same way).
std::vector<Member*> before_activation(std::vector<Member>& members) {
  std::vector<Member*> out;
  for (size_t i = 0; i + 1 < members.size(); ++i) out.push_back(&members[i]);
  return out;
}

// The products before the activation, the input quantized once when FP8 products take it. Sets
// their x A^T.
std::vector<Tensor> gate_and_up(const Tensor& x2, std::vector<Member>& members) {
  const auto before = before_activation(members);
  const auto x2_fp8 = shared_fp8_input(x2, before);
  set_adapter_inputs(x2, before);
  std::vector<Tensor> out;
  for (const auto* m : before) out.push_back(member_forward(x2, *m, x2_fp8 ? &*x2_fp8 : nullptr));
  return out;
}

// act(gate) * up from gate_and_up's products.
Tensor activation_forward(const std::vector<Tensor>& gate_up, kernels::GateActivation act) {
  return gate_up.size() == 1 ? kernels::gated_packed_forward_op(gate_up[0], act)
                             : kernels::swiglu_forward_op(gate_up[0], gate_up[1], act);
}

// The gradients of gate_and_up's products (laid out as they are) and act(gate) * up, recomputed.
std::pair<std::vector<Tensor>, Tensor> activation_backward(const Tensor& d_hidden,
                                                           const std::vector<Tensor>& gate_up,
                                                           kernels::GateActivation act) {
  if (gate_up.size() == 1) {
    auto [d_gate_up, hidden] =
        kernels::gated_packed_backward_with_output(d_hidden, gate_up[0], act);
    return {{d_gate_up}, hidden};
  }
  auto [d_gate, d_up, hidden] =
      kernels::swiglu_backward_with_output(d_hidden, gate_up[0], gate_up[1], act);
  return {{d_gate, d_up}, hidden};
}

// SwiGLU and what the next FP8 products read, from gate_and_up's products: the output and the
// same quantized per row (down's input).
std::tuple<Tensor, kernels::Fp8Rows> activation_forward_fp8(const std::vector<Tensor>& gate_up) {
  return gate_up.size() == 1 ? kernels::swiglu_forward_fp8_packed(gate_up[0])
                             : kernels::swiglu_forward_fp8(gate_up[0], gate_up[1]);
}

// Its backward: the gradients of gate_and_up's products (laid out as they are), the output
// recomputed, and the gradients side by side times `scales` quantized per row (the FP8 input
// gradient's operand).
struct ActivationBackwardFp8 {
  std::vector<Tensor> d_gate_up;
  Tensor hidden;
  kernels::Fp8Rows quantized;
};
ActivationBackwardFp8 activation_backward_fp8(const Tensor& d_hidden,
                                              const std::vector<Tensor>& gate_up,
                                              const Tensor& scales) {
  if (gate_up.size() == 1) {
    auto s = kernels::swiglu_backward_fp8_packed(d_hidden, gate_up[0], scales);
    return {{s.d_packed}, s.output, std::move(s.d_gate_up)};
  }
  auto s = kernels::swiglu_backward_fp8(d_hidden, gate_up[0], gate_up[1], scales);
  return {{s.d_gate, s.d_up}, s.output, std::move(s.d_gate_up)};
}

// down(act(gate(x)) * up(x)) over all of x2's rows at once; returns y and keeps gate_and_up's
// products in `gate_up` for backward (down's x A^T is set on members.back()).
Tensor mlp_forward(const Tensor& x2, std::vector<Member>& members, std::vector<Tensor>& gate_up,
                   kernels::GateActivation act) {
  gate_up = gate_and_up(x2, members);
  Member& down = members.back();
  if (!down.fp8) {
    const Tensor hidden = activation_forward(gate_up, act);
    set_adapter_inputs(hidden, {&down});
    return member_forward(hidden, down);
  }
  // Down's FP8 input written by the SwiGLU kernel itself (there is no GeGLU one: MLPImpl keeps
  // GeGLU under FP8 out of the group).
  TORCH_CHECK(act == kernels::GateActivation::kSilu, "the FP8 MLP node computes SwiGLU only");
  const auto [hidden, hidden_fp8] = activation_forward_fp8(gate_up);
  set_adapter_inputs(hidden, {&down});
  return member_forward(hidden, down, &hidden_fp8);
}

// The same `rows` tokens at a time, keeping nothing: backward recomputes gate and up chunk by
// chunk. The x A^T products of the last chunk are dropped (backward makes each chunk's again).
Tensor chunked_mlp_forward(const Tensor& x2, std::vector<Member>& members, int64_t rows,
                           kernels::GateActivation act) {
  Tensor y = at::empty({x2.size(0), members.back().out_features()}, x2.options());
  std::vector<Tensor> unused;
  for (int64_t start = 0; start < x2.size(0); start += rows) {
    const int64_t n = std::min(rows, x2.size(0) - start);
    y.narrow(0, start, n).copy_(mlp_forward(x2.narrow(0, start, n), members, unused, act));
  }
  for (auto& m : members) m.xa = Tensor();
  return y;
}

// The gradients of x (when `need_x`) and of the adapters (in the members' order, those that
// exist) from dy, given the forward's gate_and_up products.
struct MlpGradients {
  Tensor dx;
  variable_list adapters;
};
MlpGradients mlp_backward(const Tensor& x2, const std::vector<Tensor>& gate_up, const Tensor& dy,
                          std::vector<Member>& members, bool need_x, at::ScalarType adapter_dtype,
                          kernels::GateActivation act) {
  Member& down = members.back();
  const auto before = before_activation(members);
  AdapterInputGradients down_dx;
  const Tensor t_down = adapter_input_gradient(dy, down, /*need_x=*/true, down_dx);
  Tensor d_hidden = input_gradient({dy}, {&down}, down_dx);
  // SwiGLU's output is recomputed here instead of kept from forward.
  std::vector<Tensor> d_before;  // the gradients of gate_up's products
  Tensor hidden;
  // Gate's and up's FP8 output gradients, quantized by the SwiGLU kernel itself.
  std::optional<kernels::Fp8Rows> fp8_gradients;
  std::vector<const LinearImpl*> fp8_bases;
  for (const auto* m : before)
    if (m->fp8) fp8_bases.push_back(m->fp8);
  if (need_x && fp8_bases.size() == before.size()) {
    TORCH_CHECK(act == kernels::GateActivation::kSilu, "the FP8 MLP node computes SwiGLU only");
    auto s = activation_backward_fp8(d_hidden, gate_up, fp8_group_row_scales(fp8_bases));
    d_before = std::move(s.d_gate_up);
    hidden = s.hidden;
    fp8_gradients = std::move(s.quantized);
  } else {
    std::tie(d_before, hidden) = activation_backward(d_hidden, gate_up, act);
  }
  d_hidden = Tensor();
  if (!down.xa.defined()) set_adapter_inputs(hidden, {&down});
  AdapterInputGradients adapters_dx;
  std::vector<Tensor> ts;
  for (size_t i = 0; i < before.size(); ++i)
    ts.push_back(adapter_input_gradient(d_before[i], *before[i], need_x, adapters_dx));
  MlpGradients g;
  if (need_x)
    g.dx = input_gradient(d_before, {before.begin(), before.end()}, adapters_dx,
                          fp8_gradients ? &*fp8_gradients : nullptr);
  const auto d_as = adapter_a_gradients(ts, x2, adapter_dtype);
  for (size_t i = 0; i < before.size(); ++i)
    if (before[i]->has_lora())
      g.adapters.insert(g.adapters.end(),
                        {d_as[i], adapter_b_gradient(d_before[i], *before[i], adapter_dtype)});
  if (down.has_lora())
    g.adapters.insert(g.adapters.end(), {adapter_a_gradients({t_down}, hidden, adapter_dtype)[0],
                                         adapter_b_gradient(dy, down, adapter_dtype)});
  return g;
}

// mlp_backward `rows` tokens at a time, gate and up recomputed for each chunk; the adapters'
// gradients are summed over the chunks in fp32.
MlpGradients chunked_mlp_backward(const Tensor& x2, const Tensor& dy, std::vector<Member>& members,
                                  bool need_x, at::ScalarType adapter_dtype, int64_t rows,
                                  kernels::GateActivation act) {
  MlpGradients total;
  if (need_x) total.dx = at::empty_like(x2);
  for (int64_t start = 0; start < x2.size(0); start += rows) {
    const int64_t n = std::min(rows, x2.size(0) - start);
    const Tensor xc = x2.narrow(0, start, n);
    const auto gate_up = gate_and_up(xc, members);
    members.back().xa = Tensor();  // down's, made again from this chunk's SwiGLU output
    MlpGradients part =
        mlp_backward(xc, gate_up, dy.narrow(0, start, n), members, need_x, at::kFloat, act);
    if (need_x) total.dx.narrow(0, start, n).copy_(part.dx);
    for (size_t i = 0; i < part.adapters.size(); ++i) {
      if (i < total.adapters.size())
        total.adapters[i].add_(part.adapters[i]);
      else
        total.adapters.push_back(part.adapters[i]);
    }
  }
  for (auto& a : total.adapters) a = a.to(adapter_dtype);
  return total;
}

struct GatedMlpFunction : public torch::autograd::Function<GatedMlpFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, torch::TensorList adapters,
                        const std::vector<LinearImpl*>& linears,  // gate, up, down or gate_up, down
                        int64_t chunk_rows, int64_t activation) {
    const auto act = static_cast<kernels::GateActivation>(activation);
    const auto dtype = product_dtype(x);
    const Tensor x2 = x.reshape({-1, x.size(-1)}).to(dtype);
    auto members = members_of(linears, dtype);
    std::vector<Tensor> gate_up;
    const bool chunked = chunk_rows > 0 && chunk_rows < x2.size(0);
    Tensor y;
    if (MlpOutputNotRead::active()) {
      // Only what backward reads: gate and up, unless chunked (backward makes each chunk's then).
      if (!chunked) gate_up = gate_and_up(x2, members);
      y = at::empty({x2.size(0), members.back().out_features()}, x2.options());
    } else {
      y = chunked ? chunked_mlp_forward(x2, members, chunk_rows, act)
                  : mlp_forward(x2, members, gate_up, act);
    }
    save(ctx, x2, gate_up, members, x, adapters);
    ctx->saved_data["chunk_rows"] = chunked ? chunk_rows : int64_t{0};
    ctx->saved_data["activation"] = activation;
    return y.view(with_last(x.sizes().vec(), y.size(-1)));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Saved s = restore(ctx);
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const Tensor dy =
        grads[0].reshape({-1, s.members.back().out_features()}).to(s.x2.scalar_type());
    const bool need_x = ctx->needs_input_grad(0);
    const auto act = static_cast<kernels::GateActivation>(ctx->saved_data["activation"].toInt());
    MlpGradients g =
        chunk_rows > 0
            ? chunked_mlp_backward(s.x2, dy, s.members, need_x, s.adapter_dtype, chunk_rows, act)
            : mlp_backward(s.x2, s.extra, dy, s.members, need_x, s.adapter_dtype, act);
    variable_list out{g.dx.defined() ? g.dx.view(s.x_sizes) : Tensor()};
    out.insert(out.end(), g.adapters.begin(), g.adapters.end());
    out.push_back(Tensor());  // linears
    out.push_back(Tensor());  // chunk_rows
    out.push_back(Tensor());  // activation
    return out;
  }
};

}  // namespace

bool layers_can_group(const std::vector<LinearImpl*>& linears) {
  return std::none_of(linears.begin(), linears.end(), [](const LinearImpl* l) {
    return l->weight.requires_grad() || l->lora_dropout() > 0 ||
           (l->bias.defined() && l->bias.requires_grad());
  });
}

bool can_group(const Tensor& x, const std::vector<LinearImpl*>& linears, bool require_cuda) {
  if (require_cuda && !x.is_cuda()) return false;
  if (!layers_can_group(linears)) return false;
  // A 4-bit layer whose compute dtype is not the products' keeps its own path.
  return std::none_of(linears.begin(), linears.end(), [&](const LinearImpl* l) {
    return l->is_quantized() && l->quantized_compute_dtype() != product_dtype(x);
  });
}

std::vector<Tensor> frozen_linear_group(const Tensor& x, const std::vector<LinearImpl*>& linears) {
  // A TensorList (not a vector) so that autograd sees each adapter as an input of its own.
  const auto adapters = adapters_of(linears);
  return GroupFunction::apply(x, torch::TensorList(adapters), linears);
}

namespace {
thread_local bool mlp_output_not_read = false;
}  // namespace

MlpOutputNotRead::MlpOutputNotRead(bool not_read) : previous_(mlp_output_not_read) {
  mlp_output_not_read = not_read;
}
MlpOutputNotRead::~MlpOutputNotRead() { mlp_output_not_read = previous_; }
bool MlpOutputNotRead::active() { return mlp_output_not_read; }

int64_t swiglu_mlp_chunk_rows(int64_t tokens, int64_t intermediate) {
  constexpr int64_t kChunkBytes = 512LL << 20, kBf16 = 2;
  const int64_t rows = std::max<int64_t>(256, kChunkBytes / (intermediate * kBf16) / 256 * 256);
  return tokens > 2 * rows ? rows : 0;
}

bool mlp_node_computes(kernels::GateActivation act, bool fp8_products) {
  return act == kernels::GateActivation::kSilu || !fp8_products;
}

Tensor frozen_gated_mlp(const Tensor& x, const std::vector<LinearImpl*>& linears,
                        kernels::GateActivation act, int64_t chunk_rows) {
  TORCH_CHECK(linears.size() == 2 || linears.size() == 3,
              "the MLP node takes gate, up and down, or gate_up and down");
  const int64_t width = linears.back()->in_features();
  TORCH_CHECK(linears.size() == 2
                  ? linears[0]->out_features() == 2 * width
                  : linears[0]->out_features() == width && linears[1]->out_features() == width,
              "the MLP node's gate and up products must be down's input width each");
  const auto adapters = adapters_of(linears);
  // Chunks only where they cost nothing: a forward that keeps nothing for backward (a checkpointed
  // layer's first pass, evaluation) and the recompute. A plain forward keeping its activations
  // would pay gate and up twice.
  if (chunk_rows < 0) {
    const bool free_to_chunk = !torch::GradMode::is_enabled() || MlpOutputNotRead::active();
    chunk_rows = free_to_chunk ? swiglu_mlp_chunk_rows(x.numel() / x.size(-1), width) : 0;
  }
  return GatedMlpFunction::apply(x, torch::TensorList(adapters), linears, chunk_rows,
                                 static_cast<int64_t>(act));
}

}  // namespace kubetune::model
