// Rotary position embedding of query or key heads as one fused op, forward and backward.
//
// Unfused (transformers' x * cos + rotate_half(x) * sin) it is five kernels forward and six
// backward per tensor: a negation, a concatenation, two broadcast products that cannot use
// 16-byte accesses, and a sum; on a 1B Llama at 8k tokens per step they took 10 ms of a 122 ms
// step on an H200. The fused op reads x, cos and sin once and writes once, and its backward is
// the same rotation by the opposite angle. Registered as kubetune::rope_rotate with a CPU
// implementation and a CUDA kernel; arithmetic in fp32, one rounding to x's dtype.
#pragma once

#include <torch/types.h>

namespace kubetune::kernels {

// x: [batch, tokens, heads, head_dim], contiguous. cos, sin: [batch, tokens, head_dim] in
// transformers' layout (the two halves of the last dimension belong to the same frequencies).
// Differentiable in x.
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// The LibTorch formula the op is checked against (transformers' apply_rotary_pos_emb on one
// tensor, with the heads in dimension 2).
torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin);

}  // namespace kubetune::kernels
