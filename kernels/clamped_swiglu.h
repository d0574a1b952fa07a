// gpt-oss's experts' activation, the clamped SwiGLU over a gate_up product whose columns alternate
// gate and up (transformers' GptOssExperts._apply_gate):
//
//   out = (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g),   g = min(gate, limit)
//
// as one fused op whose backward keeps only gate_up and recomputes the rest (autograd through
// LibTorch's ops keeps five intermediates as wide as the output, and runs some fifteen kernels).
// Registered as the custom ops kubetune::clamped_swiglu_{forward,backward} with a CPU
// implementation in LibTorch's ops (transformers' formula) and a CUDA kernel.
#pragma once

#include <torch/types.h>

namespace kubetune::kernels {

// gate_up [.., 2 * width], gate at even and up at odd columns; returns [.., width].
// Differentiable in gate_up.
torch::Tensor clamped_swiglu(const torch::Tensor& gate_up, double alpha, double limit);

}  // namespace kubetune::kernels
