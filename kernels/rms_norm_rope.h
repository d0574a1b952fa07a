// A per-head RMSNorm followed by rotary position embedding, as one fused op: Qwen3's and Gemma 3's
// q_norm and k_norm, which normalise each head's head_dim values before RoPE rotates them.
//
// Unfused, LibTorch's RMSNorm kernel gives each 128-value head row a block of its own and runs at
// a quarter of the memory bandwidth (on Qwen3-8B, 4.4 ms of a 109 ms FP8 step on an H200, for 1.1
// ms of traffic), and RoPE reads and writes the heads again. The fused op reads x, cos and sin
// once and writes once, one warp per head row, the rotation's partner values exchanged between
// lanes. Its backward recomputes the row's scale from x. Registered as
// kubetune::rms_norm_rope_{forward,backward} with CPU implementations and CUDA kernels.
//
// It rounds where the unfused GPU path does (the normalised heads to x's dtype before the
// rotation; the rotated gradient before the norm's backward), so the two agree to a rounding.
#pragma once

#include <torch/types.h>

namespace kubetune::kernels {

// x: [batch, tokens, heads, head_dim], each head's values contiguous (a view of a wider product's
// columns is read in place). weight: [head_dim], the norm's scale as multiplied (Gemma's 1 + w
// already added). cos, sin: [batch, tokens, head_dim] as for rope(). Returns rope(rms_norm(x)),
// contiguous; differentiable in x and weight.
torch::Tensor rms_norm_rope(const torch::Tensor& x, const torch::Tensor& weight,
                            const torch::Tensor& cos, const torch::Tensor& sin, double eps);

// Whether the CUDA kernel takes this head_dim (64, 128 or 256: a warp's lanes split a head).
bool rms_norm_rope_fits(int64_t head_dim);

// The unfused formula the op is checked against: LibTorch's RMSNorm arithmetic (fp32, weight
// applied in fp32, one rounding) and then transformers' RoPE formula.
torch::Tensor rms_norm_rope_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                      const torch::Tensor& cos, const torch::Tensor& sin,
                                      double eps);

}  // namespace kubetune::kernels
