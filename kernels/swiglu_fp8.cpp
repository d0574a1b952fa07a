#include "kernels/swiglu_fp8.h"

#include <torch/library.h>
#include <torch/torch.h>

#include "kernels/swiglu.h"

namespace kubetune::kernels {
namespace {

// The CPU implementations: the separate ops, composed.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> forward_cpu(const torch::Tensor& gate,
                                                                    const torch::Tensor& up) {
  torch::Tensor out = swiglu_forward_op(gate, up);
  const Fp8Rows q = quantize_rows_fp8(out);
  return {out, q.values, q.scales};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> backward_cpu(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up,
    const c10::optional<torch::Tensor>& column_scale) {
  auto [d_gate, d_up, out] = swiglu_backward_with_output(grad, gate, up);
  const Fp8Rows q = quantize_rows_fp8({d_gate, d_up}, column_scale.value_or(torch::Tensor()));
  return {d_gate, d_up, out, q.values, q.scales};
}

// The kernels take rows of one shape, dtype and device (a gradient's too).
void check_swiglu_fp8_inputs(const char* op, const torch::Tensor& gate, const torch::Tensor& up,
                             const torch::Tensor& grad = {}) {
  for (const auto* t : {&up, &grad})
    TORCH_CHECK(
        !t->defined() || (gate.dim() == 2 && t->sizes() == gate.sizes() &&
                          t->scalar_type() == gate.scalar_type() && t->device() == gate.device()),
        op, ": inputs must be 2-D of one shape, dtype and device, got ", gate.sizes(), " ",
        gate.scalar_type(), " on ", gate.device(), " and ", t->sizes(), " ", t->scalar_type(),
        " on ", t->device());
}

}  // namespace

std::tuple<torch::Tensor, Fp8Rows> swiglu_forward_fp8(const torch::Tensor& gate,
                                                      const torch::Tensor& up) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::swiglu_forward_fp8", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(
                           const torch::Tensor&, const torch::Tensor&)>();
  check_swiglu_fp8_inputs("swiglu_forward_fp8", gate, up);
  auto [out, values, scales] = op.call(gate.contiguous(), up.contiguous());
  return {out, Fp8Rows{values, scales}};
}

SwigluGradientsFp8 swiglu_backward_fp8(const torch::Tensor& grad, const torch::Tensor& gate,
                                       const torch::Tensor& up, const torch::Tensor& column_scale) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("kubetune::swiglu_backward_fp8", "")
          .typed<
              std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>(
                  const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                  const c10::optional<torch::Tensor>&)>();
  check_swiglu_fp8_inputs("swiglu_backward_fp8", gate, up, grad);
  TORCH_CHECK(!column_scale.defined() || column_scale.numel() == 2 * gate.size(-1),
              "swiglu_backward_fp8: column_scale has ", column_scale.numel(), " values for ",
              2 * gate.size(-1), " columns");
  auto [d_gate, d_up, out, values, scales] =
      op.call(grad.contiguous(), gate.contiguous(), up.contiguous(),
              column_scale.defined()
                  ? c10::optional<torch::Tensor>(column_scale.to(torch::kFloat32).contiguous())
                  : c10::nullopt);
  return {d_gate, d_up, out, Fp8Rows{values, scales}};
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def("swiglu_forward_fp8(Tensor gate, Tensor up) -> (Tensor out, Tensor values, Tensor scales)");
  m.def(
      "swiglu_backward_fp8(Tensor grad, Tensor gate, Tensor up, Tensor? column_scale) -> (Tensor "
      "d_gate, Tensor d_up, Tensor out, Tensor values, Tensor scales)");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("swiglu_forward_fp8", forward_cpu);
  m.impl("swiglu_backward_fp8", backward_cpu);
}

}  // namespace kubetune::kernels
