#include "kernels/swiglu.h"

#include <torch/autograd.h>
#include <torch/library.h>
#include <torch/torch.h>

#include "kernels/op_handle.h"

namespace kubetune::kernels {
namespace {

bool is_gelu(int64_t act) { return act == static_cast<int64_t>(GateActivation::kGeluTanh); }

// CPU implementations: computed in fp32 like the CUDA kernels, so both agree to rounding.
torch::Tensor gated_forward_cpu(const torch::Tensor& gate, const torch::Tensor& up, int64_t act) {
  auto g = gate.to(torch::kFloat32);
  auto activated = is_gelu(act) ? torch::gelu(g, "tanh") : g * torch::sigmoid(g);
  return (activated * up.to(torch::kFloat32)).to(gate.scalar_type());
}

std::tuple<torch::Tensor, torch::Tensor> gated_backward_cpu(const torch::Tensor& grad,
                                                            const torch::Tensor& gate,
                                                            const torch::Tensor& up, int64_t act) {
  auto g = gate.to(torch::kFloat32), u = up.to(torch::kFloat32), dy = grad.to(torch::kFloat32);
  torch::Tensor d_gate, d_up;
  if (is_gelu(act)) {
    d_up = dy * torch::gelu(g, "tanh");
    d_gate = torch::gelu_backward(dy * u, g, "tanh");
  } else {
    auto s = torch::sigmoid(g);
    d_up = dy * g * s;
    d_gate = dy * u * s * (1 + g * (1 - s));
  }
  return {d_gate.to(gate.scalar_type()), d_up.to(up.scalar_type())};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> gated_backward_with_output_cpu(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up, int64_t act) {
  auto [d_gate, d_up] = gated_backward_cpu(grad, gate, up, act);
  return {d_gate, d_up, gated_forward_cpu(gate, up, act)};
}

std::pair<torch::Tensor, torch::Tensor> halves(const torch::Tensor& gate_up) {
  const int64_t width = gate_up.size(-1) / 2;
  return {gate_up.narrow(-1, 0, width), gate_up.narrow(-1, width, width)};
}

torch::Tensor gated_packed_forward_cpu(const torch::Tensor& gate_up, int64_t act) {
  auto [gate, up] = halves(gate_up);
  return gated_forward_cpu(gate, up, act);
}

torch::Tensor gated_packed_backward_cpu(const torch::Tensor& grad, const torch::Tensor& gate_up,
                                        int64_t act) {
  auto [gate, up] = halves(gate_up);
  auto [d_gate, d_up] = gated_backward_cpu(grad, gate, up, act);
  return torch::cat({d_gate, d_up}, -1);
}

std::tuple<torch::Tensor, torch::Tensor> gated_packed_backward_with_output_cpu(
    const torch::Tensor& grad, const torch::Tensor& gate_up, int64_t act) {
  auto [gate, up] = halves(gate_up);
  return {gated_packed_backward_cpu(grad, gate_up, act), gated_forward_cpu(gate, up, act)};
}

using Forward = torch::Tensor(const torch::Tensor&, const torch::Tensor&, int64_t);
using Backward = std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&,
                                                          const torch::Tensor&,
                                                          const torch::Tensor&, int64_t);
using BackwardWithOutput = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(
    const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, int64_t);
using PackedForward = torch::Tensor(const torch::Tensor&, int64_t);
using PackedBackward = torch::Tensor(const torch::Tensor&, const torch::Tensor&, int64_t);
using PackedBackwardWithOutput = std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&,
                                                                          const torch::Tensor&,
                                                                          int64_t);

class GatedFunction : public torch::autograd::Function<GatedFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up, int64_t act) {
    ctx->save_for_backward({gate, up});
    ctx->saved_data["act"] = act;
    static auto forward_op = op<Forward>("kubetune::gated_forward");
    return forward_op.call(gate, up, act);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    static auto backward_op = op<Backward>("kubetune::gated_backward");
    auto [d_gate, d_up] =
        backward_op.call(grads[0].contiguous(), saved[0], saved[1], ctx->saved_data["act"].toInt());
    return {d_gate, d_up, torch::Tensor()};
  }
};

// Keeps only gate_up for backward, and gives its gradient as one tensor: no copies of the halves.
class GatedPackedFunction : public torch::autograd::Function<GatedPackedFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate_up,
                               int64_t act) {
    ctx->save_for_backward({gate_up});
    ctx->saved_data["act"] = act;
    static auto forward_op = op<PackedForward>("kubetune::gated_packed_forward");
    return forward_op.call(gate_up, act);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto backward_op = op<PackedBackward>("kubetune::gated_packed_backward");
    return {backward_op.call(grads[0].contiguous(), ctx->get_saved_variables()[0],
                             ctx->saved_data["act"].toInt()),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor gated_activation(const torch::Tensor& gate, const torch::Tensor& up,
                               GateActivation act) {
  TORCH_CHECK(gate.sizes() == up.sizes(), "gated activation: gate and up shapes differ");
  TORCH_CHECK(gate.scalar_type() == up.scalar_type(),
              "gated activation: gate and up dtypes differ");
  return GatedFunction::apply(gate.contiguous(), up.contiguous(), static_cast<int64_t>(act));
}

torch::Tensor gated_activation_packed(const torch::Tensor& gate_up, GateActivation act) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "gated activation: gate_up's last dimension must hold gate and up, of equal width");
  return GatedPackedFunction::apply(gate_up.contiguous(), static_cast<int64_t>(act));
}

torch::Tensor swiglu_forward_op(const torch::Tensor& gate, const torch::Tensor& up,
                                GateActivation act) {
  static auto forward_op = op<Forward>("kubetune::gated_forward");
  return forward_op.call(gate.contiguous(), up.contiguous(), static_cast<int64_t>(act));
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> swiglu_backward_with_output(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up,
    GateActivation act) {
  static auto backward_op = op<BackwardWithOutput>("kubetune::gated_backward_with_output");
  return backward_op.call(grad.contiguous(), gate.contiguous(), up.contiguous(),
                          static_cast<int64_t>(act));
}

torch::Tensor gated_packed_forward_op(const torch::Tensor& gate_up, GateActivation act) {
  static auto forward_op = op<PackedForward>("kubetune::gated_packed_forward");
  return forward_op.call(gate_up.contiguous(), static_cast<int64_t>(act));
}

std::tuple<torch::Tensor, torch::Tensor> gated_packed_backward_with_output(
    const torch::Tensor& grad, const torch::Tensor& gate_up, GateActivation act) {
  static auto backward_op =
      op<PackedBackwardWithOutput>("kubetune::gated_packed_backward_with_output");
  return backward_op.call(grad.contiguous(), gate_up.contiguous(), static_cast<int64_t>(act));
}

torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up) {
  return torch::silu(gate) * up;
}

torch::Tensor gated_reference(const torch::Tensor& gate, const torch::Tensor& up,
                              GateActivation act) {
  return act == GateActivation::kGeluTanh ? torch::gelu(gate, "tanh") * up
                                          : swiglu_reference(gate, up);
}

TORCH_LIBRARY(kubetune, m) {
  m.def("gated_forward(Tensor gate, Tensor up, int activation) -> Tensor");
  m.def("gated_backward(Tensor grad, Tensor gate, Tensor up, int activation) -> (Tensor, Tensor)");
  m.def(
      "gated_backward_with_output(Tensor grad, Tensor gate, Tensor up, int activation) -> "
      "(Tensor, Tensor, Tensor)");
  m.def("gated_packed_forward(Tensor gate_up, int activation) -> Tensor");
  m.def("gated_packed_backward(Tensor grad, Tensor gate_up, int activation) -> Tensor");
  m.def(
      "gated_packed_backward_with_output(Tensor grad, Tensor gate_up, int activation) -> "
      "(Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("gated_forward", gated_forward_cpu);
  m.impl("gated_backward", gated_backward_cpu);
  m.impl("gated_backward_with_output", gated_backward_with_output_cpu);
  m.impl("gated_packed_forward", gated_packed_forward_cpu);
  m.impl("gated_packed_backward", gated_packed_backward_cpu);
  m.impl("gated_packed_backward_with_output", gated_packed_backward_with_output_cpu);
}

}  // namespace kubetune::kernels
