#include "kernels/swiglu_fp8.h"

#include <torch/library.h>
#include <torch/torch.h>

#include <utility>

#include "kernels/op_handle.h"
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

using ForwardOp = std::tuple<torch::Tensor, torch::Tensor, torch::Tensor>(const torch::Tensor&,
                                                                          const torch::Tensor&);
using BackwardOp =
    std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor>(
        const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
        const c10::optional<torch::Tensor>&);

// gate and up as given: contiguous, or the halves of one packed tensor (the CUDA kernels read
// those in place).
std::tuple<torch::Tensor, Fp8Rows> forward_fp8(const torch::Tensor& gate, const torch::Tensor& up) {
  static auto forward_op = op<ForwardOp>("kubetune::swiglu_forward_fp8");
  check_swiglu_fp8_inputs("swiglu_forward_fp8", gate, up);
  auto [out, values, scales] = forward_op.call(gate, up);
  return {out, Fp8Rows{values, scales}};
}

SwigluGradientsFp8 backward_fp8(const torch::Tensor& grad, const torch::Tensor& gate,
                                const torch::Tensor& up, const torch::Tensor& column_scale) {
  static auto backward_op = op<BackwardOp>("kubetune::swiglu_backward_fp8");
  check_swiglu_fp8_inputs("swiglu_backward_fp8", gate, up, grad);
  TORCH_CHECK(!column_scale.defined() || column_scale.numel() == 2 * gate.size(-1),
              "swiglu_backward_fp8: column_scale has ", column_scale.numel(), " values for ",
              2 * gate.size(-1), " columns");
  auto [d_gate, d_up, out, values, scales] = backward_op.call(
      grad.contiguous(), gate, up,
      column_scale.defined()
          ? c10::optional<torch::Tensor>(column_scale.to(torch::kFloat32).contiguous())
          : c10::nullopt);
  return {d_gate, d_up, out, Fp8Rows{values, scales}, {}};
}

std::pair<torch::Tensor, torch::Tensor> halves(const torch::Tensor& gate_up) {
  TORCH_CHECK(gate_up.dim() == 2 && gate_up.size(1) % 2 == 0,
              "swiglu fp8: gate_up must be [rows, 2 * width], got ", gate_up.sizes());
  const auto packed = gate_up.contiguous();
  const int64_t width = packed.size(1) / 2;
  return {packed.narrow(1, 0, width), packed.narrow(1, width, width)};
}

// a and b side by side: the packed tensor they are the halves of (what the CUDA kernel writes), or
// their concatenation (the CPU composition writes them apart).
torch::Tensor side_by_side(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t cols = a.size(1);
  return are_packed_halves(a, b) ? a.as_strided({a.size(0), 2 * cols}, {2 * cols, 1})
                                 : torch::cat({a, b}, 1);
}

}  // namespace

bool are_packed_halves(const torch::Tensor& gate, const torch::Tensor& up) {
  const int64_t cols = gate.size(1);
  return gate.is_alias_of(up) && gate.stride(1) == 1 && up.stride(1) == 1 &&
         gate.stride(0) == 2 * cols && up.stride(0) == 2 * cols &&
         static_cast<const char*>(up.data_ptr()) ==
             static_cast<const char*>(gate.data_ptr()) + cols * gate.element_size();
}

std::tuple<torch::Tensor, Fp8Rows> swiglu_forward_fp8(const torch::Tensor& gate,
                                                      const torch::Tensor& up) {
  return forward_fp8(gate.contiguous(), up.contiguous());
}

SwigluGradientsFp8 swiglu_backward_fp8(const torch::Tensor& grad, const torch::Tensor& gate,
                                       const torch::Tensor& up, const torch::Tensor& column_scale) {
  return backward_fp8(grad, gate.contiguous(), up.contiguous(), column_scale);
}

std::tuple<torch::Tensor, Fp8Rows> swiglu_forward_fp8_packed(const torch::Tensor& gate_up) {
  auto [gate, up] = halves(gate_up);
  return forward_fp8(gate, up);
}

SwigluGradientsFp8 swiglu_backward_fp8_packed(const torch::Tensor& grad,
                                              const torch::Tensor& gate_up,
                                              const torch::Tensor& column_scale) {
  auto [gate, up] = halves(gate_up);
  SwigluGradientsFp8 g = backward_fp8(grad, gate, up, column_scale);
  g.d_packed = side_by_side(g.d_gate, g.d_up);
  return g;
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
