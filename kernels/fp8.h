// FP8 (E4M3) products with row-wise scales, the building block of model.precision fp8.
//
// A matrix is quantized one row at a time: each row is scaled so that its largest magnitude
// becomes 448 (E4M3's largest finite value), rounded to E4M3 (nearest even, saturating), and the
// row's scale (its amax / 448) is kept in float32. A product of two such matrices is then exact
// up to the E4M3 rounding of the inputs: out[m, n] = sa[m] sb[n] sum_k qa[m, k] qb[n, k].
//
// On CUDA the product is at::_scaled_mm (cuBLASLt's FP8 GEMM; Hopper or newer; fp8_mm_add_ calls
// cuBLASLt itself to add a product to an existing matrix) and quantization is
// one kernel (two passes over each row, a block of threads per row, kernels/fp8_cuda.cu). On the
// CPU both are the reference formulas in float32, which the CUDA versions are tested against;
// _scaled_mm on the CPU takes only one scale per tensor, so the CPU product dequantizes instead.
//
// Registered as kubetune::fp8_quantize_rows (TORCH_LIBRARY) so Python tests can call it.
#pragma once

#include <torch/types.h>

#include <vector>

namespace kubetune::kernels {

// E4M3's largest finite value: a row's largest magnitude is scaled to it.
inline constexpr float kFp8Max = 448.0f;
// The smallest row maximum a scale is made from: an all-zero row quantizes to zeros, not NaN.
// Small enough not to flush tiny gradients.
inline constexpr float kFp8MinAmax = 1e-30f;

struct Fp8Rows {
  torch::Tensor values;  // [rows, cols] float8_e4m3fn, contiguous
  torch::Tensor scales;  // [rows, 1] float32: row i is values[i] * scales[i]
  int64_t rows() const { return values.size(0); }
  int64_t cols() const { return values.size(1); }
  int64_t bytes() const { return values.numel() + scales.numel() * 4; }
};

// The scales of rows whose largest magnitudes are `row_amax` ([rows] or [rows, 1], clamped to
// kFp8MinAmax): [rows, 1] float32, amax / kFp8Max as a true division, as the quantization kernel
// makes them (a tensor divided by a number on CUDA is multiplied by its reciprocal, one rounding
// off).
torch::Tensor fp8_row_scales(const torch::Tensor& row_amax);

// x's rows times kFp8Max / row_amax, rounded to E4M3, in float32: the reference arithmetic of the
// quantization, for rows whose maxima are known.
torch::Tensor fp8_values_of_rows(const torch::Tensor& x, const torch::Tensor& row_amax);

// W^T as an input gradient dx = dy W takes it: W's values transposed ([cols, rows], the layout
// cuBLASLt's FP8 GEMM takes as its second operand here) and W's row scales, which lie along that
// product's sum and are folded into dy (trainer/model/fp8_linear.h).
struct Fp8Transposed {
  torch::Tensor values;      // [cols, rows] float8_e4m3fn, contiguous
  torch::Tensor row_scales;  // [rows, 1] float32, W's
};

// x [rows, cols] (bf16, fp16 or fp32) quantized per row. With `column_scale` ([cols] float32),
// x * column_scale is what is quantized (the input gradient folds a weight's row scales in so).
Fp8Rows quantize_rows_fp8(const torch::Tensor& x, const torch::Tensor& column_scale = {});
// The matrices `parts` (2-D, the same rows and dtype) side by side, quantized as one, each read
// where it is (the gradients of a group's outputs for one input gradient product).
Fp8Rows quantize_rows_fp8(const std::vector<torch::Tensor>& parts,
                          const torch::Tensor& column_scale = {});

// values [rows, cols] (float8_e4m3fn) transposed into a new contiguous [cols, rows] matrix. On CUDA
// one tiled kernel moving 4 bytes per thread: LibTorch's generic copy of a float8 transpose moves
// one byte per thread and ran at a tenth of the memory bandwidth (0.42 ms for a 14336 x 4096
// weight on an H100; bench/README.md, session 17).
torch::Tensor transpose_fp8(const torch::Tensor& values);
// values [rows, cols] transposed into columns [first_column, first_column + rows) of `out`, a
// contiguous [cols, N] float8 matrix: several weights' transposes side by side.
void transpose_fp8_into(const torch::Tensor& values, torch::Tensor& out, int64_t first_column);
Fp8Transposed transposed(const Fp8Rows& w);

// The dense matrix an Fp8Rows stands for, in `dtype`.
torch::Tensor dequantize_rows_fp8(const Fp8Rows& q, torch::ScalarType dtype);

// a [M, K] times b [N, K] transposed: [M, N] in `out_dtype` (bf16 on CUDA). `fast_accumulate`
// lets the tensor cores accumulate in their own reduced precision (torchao does so for the forward
// product only).
torch::Tensor fp8_mm(const Fp8Rows& a, const Fp8Rows& b, torch::ScalarType out_dtype,
                     bool fast_accumulate);

// out += a b^T for out [M, N] (contiguous; bf16, fp16 or fp32), with one rounding of the sum. On
// CUDA one cuBLASLt GEMM reading `out` in its epilogue (beta = 1): the sum costs no pass of its own
// over out, where _scaled_mm's product then an addition read and wrote it once more. Registered as
// kubetune::fp8_mm_add_.
void fp8_mm_add_(torch::Tensor& out, const Fp8Rows& a, const Fp8Rows& b, bool fast_accumulate);

// Whether a [rows, cols] weight can take part in fp8_mm on CUDA: cuBLASLt's FP8 GEMM needs both
// of a weight's sizes to be multiples of 16.
bool fp8_shape_supported(int64_t rows, int64_t cols);

// Whether `device` runs fp8_mm: a CPU (the reference) or an NVIDIA GPU of compute capability 9.0+.
bool fp8_supported_on(const torch::Device& device);

}  // namespace kubetune::kernels
