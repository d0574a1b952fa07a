// CUDA implementation of kubetune::fp8_quantize_rows: one block per row, two passes over it (the
// row's largest magnitude, then the scaled and rounded values; the second pass reads from L2),
// 16-byte loads where the row allows, float32 arithmetic (no fast math) so the result is the CPU
// reference's to the bit.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp8.h>
#include <torch/library.h>

#include "kernels/fp8.h"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

constexpr int kRowThreads = 256;
constexpr float kMinAmax = 1e-30f;  // as in fp8.cpp: an all-zero row gives zeros

__device__ float block_max(float v) {
  __shared__ float warp_max[kRowThreads / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < kRowThreads / 32 ? warp_max[threadIdx.x] : 0.f;
  if (threadIdx.x < 32)
    for (int offset = 16; offset > 0; offset /= 2)
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __shared__ float result;
  if (threadIdx.x == 0) result = v;
  __syncthreads();
  return result;
}

__device__ __nv_fp8_storage_t to_e4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// The row's elements [i * W, i * W + W) for pack i (W = 1 without 16-byte loads), times the column
// scales when there are any.
template <typename T, int W>
struct RowPack {
  float v[W];
  __device__ RowPack(const T* row, const float* column_scale, int64_t i) {
    if constexpr (W > 1) {
      const auto pack = Vec<T>::load(row + i * W);
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = static_cast<float>(pack.v[j]);
    } else {
      v[0] = static_cast<float>(row[i]);
    }
    if (column_scale)
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] *= column_scale[i * W + j];
  }
};

template <typename T, int W>
__global__ void quantize_rows_kernel(const T* __restrict__ x,
                                     const float* __restrict__ column_scale,
                                     __nv_fp8_storage_t* __restrict__ values,
                                     float* __restrict__ scales, int64_t cols) {
  const int64_t row = blockIdx.x;
  const T* in = x + row * cols;
  __nv_fp8_storage_t* out = values + row * cols;
  const int64_t packs = cols / W;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < packs; i += kRowThreads) {
    RowPack<T, W> p(in, column_scale, i);
#pragma unroll
    for (int j = 0; j < W; ++j) amax = fmaxf(amax, fabsf(p.v[j]));
  }
  amax = fmaxf(block_max(amax), kMinAmax);
  const float inv = kFp8Max / amax;
  for (int64_t i = threadIdx.x; i < packs; i += kRowThreads) {
    RowPack<T, W> p(in, column_scale, i);
#pragma unroll
    for (int j = 0; j < W; ++j) out[i * W + j] = to_e4m3(p.v[j] * inv);
  }
  if (threadIdx.x == 0) scales[row] = amax / kFp8Max;
}

std::tuple<at::Tensor, at::Tensor> quantize_rows_cuda(
    const at::Tensor& x, const c10::optional<at::Tensor>& column_scale) {
  TORCH_CHECK(x.dim() == 2, "fp8_quantize_rows: x must be 2-D, got ", x.sizes());
  c10::cuda::CUDAGuard guard(x.device());
  const auto in = x.contiguous();
  at::Tensor cs;
  if (column_scale) cs = column_scale->to(at::kFloat).contiguous();
  const int64_t rows = in.size(0), cols = in.size(1);
  auto values = at::empty({rows, cols}, in.options().dtype(at::kFloat8_e4m3fn));
  auto scales = at::empty({rows, 1}, in.options().dtype(at::kFloat));
  if (rows == 0) return {values, scales};
  const float* csp = cs.defined() ? cs.data_ptr<float>() : nullptr;
  auto* vp = reinterpret_cast<__nv_fp8_storage_t*>(values.data_ptr());
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, in.scalar_type(), "fp8_quantize_rows", [&] {
        const auto* xp = in.data_ptr<scalar_t>();
        constexpr int kW = Vec<scalar_t>::kWidth;
        // Every row starts 16-byte aligned when cols is a multiple
        // of the pack and the tensor itself is aligned.
        if (Vec<scalar_t>::usable(cols, xp))
          quantize_rows_kernel<scalar_t, kW>
              <<<rows, kRowThreads, 0, stream>>>(xp, csp, vp, scales.data_ptr<float>(), cols);
        else
          quantize_rows_kernel<scalar_t, 1>
              <<<rows, kRowThreads, 0, stream>>>(xp, csp, vp, scales.data_ptr<float>(), cols);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {values, scales};
}

// A 64 x 64 byte tile through shared memory: each thread reads 4 consecutive bytes of an input row
// and writes 4 consecutive bytes of an output row (16 threads cover a tile row, 16 rows a pass).
constexpr int kTile = 64, kWordsPerRow = kTile / 4, kTileThreads = 256;

__global__ void transpose_bytes_kernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                                       int64_t rows, int64_t cols) {
  __shared__ alignas(4) uint8_t tile[kTile][kTile + 4];
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int word = threadIdx.x % kWordsPerRow, first = threadIdx.x / kWordsPerRow;
  constexpr int kStride = kTileThreads / kWordsPerRow;
  for (int i = first; i < kTile; i += kStride) {
    const int64_t r = r0 + i, c = c0 + word * 4;
    if (r < rows && c < cols)
      *reinterpret_cast<uint32_t*>(&tile[i][word * 4]) =
          *reinterpret_cast<const uint32_t*>(in + r * cols + c);
  }
  __syncthreads();
  for (int i = first; i < kTile; i += kStride) {
    const int64_t out_row = c0 + i, out_col = r0 + word * 4;
    if (out_row < cols && out_col < rows) {
      const int t = word * 4;
      const uint32_t packed = uint32_t(tile[t][i]) | uint32_t(tile[t + 1][i]) << 8 |
                              uint32_t(tile[t + 2][i]) << 16 | uint32_t(tile[t + 3][i]) << 24;
      *reinterpret_cast<uint32_t*>(out + out_row * rows + out_col) = packed;
    }
  }
}

at::Tensor transpose_cuda(const at::Tensor& values) {
  TORCH_CHECK(values.dim() == 2 && values.element_size() == 1,
              "fp8_transpose: a 2-D matrix of one-byte values, got ", values.sizes());
  const auto in = values.contiguous();
  const int64_t rows = in.size(0), cols = in.size(1);
  // 4-byte words must not straddle rows: both sizes multiples of 4 (FP8 weights are of 16).
  if (rows % 4 != 0 || cols % 4 != 0 || reinterpret_cast<std::uintptr_t>(in.data_ptr()) % 4 != 0)
    return in.t().contiguous();
  c10::cuda::CUDAGuard guard(in.device());
  auto out = at::empty({cols, rows}, in.options());
  if (rows == 0 || cols == 0) return out;
  const dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
  transpose_bytes_kernel<<<grid, kTileThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      static_cast<const uint8_t*>(in.data_ptr()), static_cast<uint8_t*>(out.data_ptr()), rows,
      cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("fp8_quantize_rows", quantize_rows_cuda);
  m.impl("fp8_transpose", transpose_cuda);
}

}  // namespace kubetune::kernels
