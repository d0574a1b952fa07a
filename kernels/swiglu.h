// SwiGLU, silu(gate) * up, the Llama MLP's activation, as one fused op.
//
// Unfused, LibTorch runs silu and mul as two kernels and autograd keeps both inputs plus the silu
// output; the fused op reads gate and up once, writes once, and its backward recomputes silu from
// the saved inputs. Registered as the custom op kubetune::swiglu (TORCH_LIBRARY) with a CPU
// reference implementation and a CUDA kernel.
#pragma once

#include <torch/types.h>

namespace kubetune::kernels {

// Differentiable; gate and up have the same shape and dtype.
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

// The plain-LibTorch formula the kernels are checked against.
torch::Tensor swiglu_reference(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace kubetune::kernels
