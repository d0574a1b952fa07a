// model.precision fp8: the decoder layers' linear products in FP8 E4M3 with row-wise scales
// (kernels/fp8.h), torchao's float8 "row-wise, weight gradient in high precision" recipe:
//
//   forward         y  = x W^T    x per token row, W per output row
//   input gradient  dx = dy W     dy per token row with W's row scales folded in (they lie along
//                                 the sum), times W^T laid out as cuBLASLt's FP8 GEMM wants it
//   weight gradient dW = dy^T x   in the compute dtype (bf16), not FP8
//
// Both FP8 products use the tensor cores' fast accumulation, as torchao's row-wise recipes do for
// every product: 6-9% faster GEMMs on an H100 (bench/README.md, fp8_gemm_probe.py), and
// tests/gpu/fp8_convergence_test.py holds the held-out loss to bf16's with it.
//
// A frozen weight (LoRA's base) is quantized once and kept in FP8, in both layouts: W for the
// forward, and W^T beside the other layers of its input gradient's product (keep_fp8_transposed),
// as bf16's memory. Transposing it in each step instead took 6.3 ms of an 8B LoRA step of 188 on
// an H100 (bench/README.md, session 22). A 4-bit (QLoRA) one is converted to FP8 for each product,
// straight from its codes and already transposed for backward (kernels/fp8_from_4bit.h). A
// trainable weight (full fine-tuning) is quantized in each forward; its FP8 form is what backward
// keeps of it.
#pragma once

#include <torch/types.h>

#include <vector>

#include "kernels/fp8.h"

namespace kubetune::model {

class LinearImpl;

// y = x W^T for an input already quantized (layers reading the same input share it).
torch::Tensor fp8_forward_product(const kernels::Fp8Rows& x, const kernels::Fp8Rows& w,
                                  torch::ScalarType out_dtype);
// y += x W^T, in the GEMM's epilogue (a LoRA layer's adapter part is y).
void fp8_forward_product_add_(torch::Tensor& y, const kernels::Fp8Rows& x,
                              const kernels::Fp8Rows& w);

// dx = dy W, dy [tokens, out] in the compute dtype.
torch::Tensor fp8_input_gradient(const torch::Tensor& dy, const kernels::Fp8Transposed& w,
                                 torch::ScalarType out_dtype);

// dx = sum_i dy_i W_i for frozen layers reading the same input (q, k, v; gate, up), as one product
// of [dy_1 dy_2 ...] and [W_1; W_2; ...]: the output gradients quantized as one matrix (one scale
// per token across them: fp8_group_output_gradients, or the kernel that made the gradients,
// kernels/swiglu_fp8.h), the weights transposed side by side. One quantization, one GEMM and no
// additions, where each layer's part took its own three kernels and an addition.
torch::Tensor fp8_group_input_gradient(const kernels::Fp8Rows& dy,
                                       const std::vector<const LinearImpl*>& layers,
                                       torch::ScalarType out_dtype);
// dx += that product, in the GEMM's epilogue (kernels::fp8_mm_add_): the adapters' parts of dx
// are written first and cost no pass of their own over it.
void fp8_group_input_gradient_add_(torch::Tensor& dx, const kernels::Fp8Rows& dy,
                                   const std::vector<const LinearImpl*>& layers);
// [dy_1 dy_2 ...] quantized per row as one matrix, times fp8_group_row_scales(layers).
kernels::Fp8Rows fp8_group_output_gradients(const std::vector<torch::Tensor>& dys,
                                            const std::vector<const LinearImpl*>& layers);
// The layers' FP8 row scales one after another, [sum of out_features] float32: the column scales
// their output gradients are quantized with.
torch::Tensor fp8_group_row_scales(const std::vector<const LinearImpl*>& layers);

// Keeps the FP8 bases of `layers` (those whose input gradients are one product, in its order)
// transposed side by side, with their row scales, for every input gradient from now on. Does
// nothing unless each is a frozen base kept in FP8 (not 4-bit, not trainable). Layers that never
// run as one group (layers_can_group: under LoRA dropout, say) are each kept alone.
void keep_fp8_transposed(const std::vector<LinearImpl*>& layers);

// x [..., in] times `layer`'s frozen base weight in FP8 (LinearImpl::fp8_base), differentiable in
// x, products in `dtype`. The layer must outlive the autograd graph.
torch::Tensor fp8_frozen_linear(const torch::Tensor& x, const LinearImpl& layer,
                                torch::ScalarType dtype);

// x W^T for a trainable `weight`, products in `dtype`, gradients for both.
torch::Tensor fp8_linear(const torch::Tensor& x, const torch::Tensor& weight,
                         torch::ScalarType dtype);

}  // namespace kubetune::model
