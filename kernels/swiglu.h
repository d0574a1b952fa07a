// SwiGLU, silu(gate) * up, the Llama MLP's activation, as one fused op.
//
// Unfused, LibTorch runs silu and mul as two kernels and autograd keeps both inputs plus the silu
// output; the fused op reads gate and up once, writes once, and its backward recomputes silu from
// the saved inputs. Registered as the custom op kubetune::swiglu (TORCH_LIBRARY) with a CPU
// reference implementation and a CUDA kernel.
#pragma once

#include <torch/types.h>

#include <tuple>

namespace kubetune::kernels {

// Differentiable; gate and up have the same shape and dtype.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// The ops without autograd, for a caller with its own backward (the frozen LoRA MLP):
// silu(gate) * up, and, from the output's gradient, (d_gate, d_up, silu(gate) * up) in one pass,
// so the output need not be kept from forward.
torch::Tensor swiglu_forward_op(const torch::Tensor& gate, const torch::Tensor& up);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> swiglu_backward_with_output(
    const torch::Tensor& grad, const torch::Tensor& gate, const torch::Tensor& up);

// The plain-LibTorch formula the kernels are checked against.
torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace kubetune::kernels
