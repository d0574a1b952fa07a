// model.precision fp8 over QLoRA's 4-bit base weights: the weight's FP8 rows (kernels/fp8.h) made
// straight from its 4-bit codes (kernels/quant4.h), for each product, forward and backward.
//
// Composed, dequantize_4bit then quantize_rows_fp8 then (for backward) transpose_fp8 move about
// seven bytes per weight value through memory: half a byte read, two bf16 bytes written and read
// twice, one FP8 byte written, and the transpose's two. Here it is one pass: half a byte read, one
// written, already transposed for backward. The result is the composition's to the bit: each value
// is rounded to the compute dtype first, as dequantize_4bit writes it, then scaled by
// 448 / the row's largest magnitude. That maximum does not change (the base weight is frozen), so
// it is computed once, by row_amax_4bit.
//
// Registered as kubetune::fp8_from_4bit and kubetune::fp8_from_4bit_transposed_into
// (TORCH_LIBRARY); on the CPU they dequantize and scale by the given row maxima with the
// quantization's own arithmetic, the reference the CUDA kernels are tested against.
#pragma once

#include <torch/types.h>

#include "kernels/quant4.h"

namespace kubetune::kernels {

// Each row's largest magnitude of the weight dequantized to `dtype`, clamped below as
// quantize_rows_fp8 clamps it: [out] float32, on the state's device.
torch::Tensor row_amax_4bit(const Quant4State& state, torch::ScalarType dtype);

// quantize_rows_fp8(dequantize_4bit(state, dtype)).values, given row_amax_4bit(state, dtype):
// [out, in] float8_e4m3fn, or its transpose [in, out] when `transposed` (the second operand of an
// input gradient's product; fp8_from_4bit_transposed_into at column 0); its row scales are
// fp8_row_scales(row_amax) (kernels/fp8.h). On CUDA both sizes must be multiples of 16
// (fp8_shape_supported).
torch::Tensor fp8_from_4bit(const Quant4State& state, const torch::Tensor& row_amax,
                            torch::ScalarType dtype, bool transposed);

// The transposed form written into columns [first_column, first_column + out) of `out`, a
// contiguous [in, N] float8 matrix (several weights' transposes side by side; on CUDA N and
// first_column multiples of 4).
void fp8_from_4bit_transposed_into(const Quant4State& state, const torch::Tensor& row_amax,
                                   torch::ScalarType dtype, torch::Tensor& out,
                                   int64_t first_column);

}  // namespace kubetune::kernels
