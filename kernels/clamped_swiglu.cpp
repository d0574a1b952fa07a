#include "kernels/clamped_swiglu.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "kernels/op_handle.h"

namespace kubetune::kernels {
namespace {

using torch::Tensor;

Tensor gates_of(const Tensor& gate_up) { return gate_up.slice(-1, 0, gate_up.size(-1), 2); }
Tensor ups_of(const Tensor& gate_up) { return gate_up.slice(-1, 1, gate_up.size(-1), 2); }

// transformers' formula, in the input's dtype as transformers computes it.
Tensor forward_cpu(const Tensor& gate_up, double alpha, double limit) {
  const Tensor g = gates_of(gate_up).clamp_max(limit);
  return (ups_of(gate_up).clamp(-limit, limit) + 1) * (g * at::sigmoid(g * alpha));
}

// Its derivative, in fp32; clamp passes the gradient where the value was inside its bounds
// (bounds included), as autograd's clamp does.
Tensor backward_cpu(const Tensor& grad, const Tensor& gate_up, double alpha, double limit) {
  const Tensor gate = gates_of(gate_up).to(at::kFloat), up = ups_of(gate_up).to(at::kFloat);
  const Tensor dy = grad.to(at::kFloat);
  const Tensor g = gate.clamp_max(limit), s = at::sigmoid(g * alpha);
  const Tensor d_up = dy * (g * s) * (up >= -limit).logical_and(up <= limit);
  const Tensor d_gate =
      dy * (up.clamp(-limit, limit) + 1) * (s + g * alpha * s * (1 - s)) * (gate <= limit);
  // Back into gate_up's columns: gate at even, up at odd positions.
  return at::stack({d_gate, d_up}, -1).flatten(-2).to(gate_up.scalar_type());
}

class ClampedSwigluFunction : public torch::autograd::Function<ClampedSwigluFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& gate_up, double alpha,
                        double limit) {
    ctx->save_for_backward({gate_up});
    ctx->saved_data["alpha"] = alpha;
    ctx->saved_data["limit"] = limit;
    static auto forward_op =
        op<Tensor(const Tensor&, double, double)>("kubetune::clamped_swiglu_forward");
    return forward_op.call(gate_up, alpha, limit);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto backward_op = op<Tensor(const Tensor&, const Tensor&, double, double)>(
        "kubetune::clamped_swiglu_backward");
    return {
        backward_op.call(grads[0].contiguous(), ctx->get_saved_variables()[0],
                         ctx->saved_data["alpha"].toDouble(), ctx->saved_data["limit"].toDouble()),
        {},
        {}};
  }
};

}  // namespace

Tensor clamped_swiglu(const Tensor& gate_up, double alpha, double limit) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "clamped SwiGLU: gate_up's last dimension must alternate gate and up columns");
  return ClampedSwigluFunction::apply(gate_up.contiguous(), alpha, limit);
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def("clamped_swiglu_forward(Tensor gate_up, float alpha, float limit) -> Tensor");
  m.def("clamped_swiglu_backward(Tensor grad, Tensor gate_up, float alpha, float limit) -> Tensor");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("clamped_swiglu_forward", forward_cpu);
  m.impl("clamped_swiglu_backward", backward_cpu);
}

}  // namespace kubetune::kernels
