// RMSNorm with a frozen weight (LoRA's and QLoRA's base model) as one fused op: y = x *
// rsqrt(mean(x^2) + eps) * w over the last dimension, and in backward x's gradient only.
//
// LibTorch's _fused_rms_norm runs through its layer-norm kernels, a block of threads per row:
// on the rows of one head (128 values: Qwen3's and Gemma 3's q/k norms) they took 40 us forward
// and 49 us backward for 33 MB on an H200, where moving the bytes takes about 17 (Qwen3-8B, FP8
// QLoRA: 6.4 ms of a 114 ms step in norms, Unsloth's 2.6). Here a warp takes a row, 16-byte
// loads, and backward needs only the saved per-row 1/rms. Registered as kubetune::rms_norm_forward
// and kubetune::rms_norm_backward with CPU implementations; arithmetic in fp32, one rounding.
#pragma once

#include <torch/types.h>

namespace kubetune::kernels {

// Whether rms_norm_frozen takes x and this weight: a weight that needs no gradient, of x's dtype
// and last dimension, that dimension a multiple of 16 bytes.
bool rms_norm_frozen_supported(const torch::Tensor& x, const torch::Tensor& weight);

// Differentiable in x; the weight gets no gradient.
torch::Tensor rms_norm_frozen(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The LibTorch formula it is checked against: in fp32, rounded once to x's dtype.
torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace kubetune::kernels
