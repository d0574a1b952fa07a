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
constexpr float kMinAmax = 1e-12f;  // as in fp8.cpp: an all-zero row gives zeros

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

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) { m.impl("fp8_quantize_rows", quantize_rows_cuda); }

}  // namespace kubetune::kernels
