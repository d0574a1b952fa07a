// The gated MLP's activation, act(gate) * up, as one fused op: SwiGLU (act = SiLU: Llama, Qwen,
// Mistral, Phi) or GeGLU (act = tanh-approximated GELU: Gemma).
//
// Unfused, LibTorch runs the activation and the product as two kernels and autograd keeps both
// inputs plus the activation's output; the fused op reads gate and up once, writes once, and its
// backward recomputes the activation from the saved inputs. Gate and up come as two tensors, or
// packed side by side in one [.., 2 * width] tensor as a fused gate_up_proj writes them (Phi-3),
// which the packed op reads in place and whose gradient it writes in place, with no copies of
// the halves. Registered as the custom ops kubetune::gated_* (TORCH_LIBRARY) with CPU reference
// implementations and CUDA kernels.
#pragma once

#include <torch/types.h>

#include <tuple>

namespace kubetune::kernels {

enum class GateActivation : int64_t { kSilu = 0, kGeluTanh = 1 };

// Differentiable; gate and up have the same shape and dtype.
torch::Tensor gated_activation(const torch::Tensor& gate, const torch::Tensor& up,
                               GateActivation act);
inline torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  return gated_activation(gate, up, GateActivation::kSilu);
}
// gate_up [.., 2 * width]: gate is the first half of the last dimension, up the second.
// Differentiable; returns [.., width].
torch::Tensor gated_activation_packed(const torch::Tensor& gate_up, GateActivation act);

// The ops without autograd, for a caller with its own backward (the frozen LoRA MLP):
// act(gate) * up, and, from the output's gradient, (d_gate, d_up, act(gate) * up) in one pass,
// so the output need not be kept from forward.
torch::Tensor swiglu_forward_op(const torch::Tensor& gate, const torch::Tensor& up,
                                GateActivation act = GateActivation::kSilu);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> swiglu_backward_with_output(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up,
    GateActivation act = GateActivation::kSilu);

// The same on gate and up packed side by side ([.., 2 * width], gate first): act(gate) * up, and
// (the packed gradient, act(gate) * up).
torch::Tensor gated_packed_forward_op(const torch::Tensor& gate_up,
                                      GateActivation act = GateActivation::kSilu);
std::tuple<torch::Tensor, torch::Tensor> gated_packed_backward_with_output(
    const torch::Tensor& grad, const torch::Tensor& gate_up,
    GateActivation act = GateActivation::kSilu);

// The plain-LibTorch formulas (transformers' own): what the kernels are checked against, and the
// model's CPU path.
torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor gated_reference(const torch::Tensor& gate, const torch::Tensor& up,
                              GateActivation act);

}  // namespace kubetune::kernels
