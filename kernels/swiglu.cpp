#include "kernels/swiglu.h"

#include <torch/autograd.h>
#include <torch/library.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

// CPU implementations: computed in fp32 like the CUDA kernel, so both agree to rounding.
torch::Tensor swiglu_forward_cpu(const torch::Tensor& gate, const torch::Tensor& up) {
  auto g = gate.to(torch::kFloat32);
  return (g * torch::sigmoid(g) * up.to(torch::kFloat32)).to(gate.scalar_type());
}

std::tuple<torch::Tensor, torch::Tensor> swiglu_backward_cpu(const torch::Tensor& grad,
                                                             const torch::Tensor& gate,
                                                             const torch::Tensor& up) {
  auto g = gate.to(torch::kFloat32), u = up.to(torch::kFloat32), dy = grad.to(torch::kFloat32);
  auto s = torch::sigmoid(g);
  auto d_up = dy * g * s;
  auto d_gate = dy * u * s * (1 + g * (1 - s));
  return {d_gate.to(gate.scalar_type()), d_up.to(up.scalar_type())};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> swiglu_backward_with_output_cpu(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up) {
  auto [d_gate, d_up] = swiglu_backward_cpu(grad, gate, up);
  return {d_gate, d_up, swiglu_forward_cpu(gate, up)};
}

class SwiGLUFunction : public torch::autograd::Function<SwiGLUFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("kubetune::swiglu_forward", "")
                         .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>();
    return op.call(gate, up);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    static auto op = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("kubetune::swiglu_backward", "")
                         .typed<std::tuple<torch::Tensor, torch::Tensor>(
                             const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>();
    auto [d_gate, d_up] = op.call(grads[0].contiguous(), saved[0], saved[1]);
    return {d_gate, d_up};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  TORCH_CHECK(gate.sizes() == up.sizes(), "swiglu: gate and up shapes differ");
  TORCH_CHECK(gate.scalar_type() == up.scalar_type(), "swiglu: gate and up dtypes differ");
  return SwiGLUFunction::apply(gate.contiguous(), up.contiguous());
}

torch::Tensor swiglu_forward_op(const torch::Tensor& gate, const torch::Tensor& up) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::swiglu_forward", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&)>();
  return op.call(gate.contiguous(), up.contiguous());
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> swiglu_backward_with_output(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::swiglu_backward_with_output", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(
                           const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>();
  return op.call(grad.contiguous(), gate.contiguous(), up.contiguous());
}

torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up) {
  return torch::silu(gate) * up;
}

TORCH_LIBRARY(kubetune, m) {
  m.def("swiglu_forward(Tensor gate, Tensor up) -> Tensor");
  m.def("swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)");
  m.def(
      "swiglu_backward_with_output(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor, "
      "Tensor)");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("swiglu_forward", swiglu_forward_cpu);
  m.impl("swiglu_backward", swiglu_backward_cpu);
  m.impl("swiglu_backward_with_output", swiglu_backward_with_output_cpu);
}

}  // namespace kubetune::kernels
