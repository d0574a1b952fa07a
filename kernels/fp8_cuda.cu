// CUDA implementation of kubetune::fp8_quantize_rows: one block per row, two passes over it (the
// row's largest magnitude, then the scaled and rounded values; the second from registers where the
// row fits them), 16-byte loads and W-byte stores where the row allows, float32 arithmetic (no
// fast math) so the result is the CPU reference's to the bit.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp8.h>
#include <torch/library.h>

#include <type_traits>

#include "kernels/fp8.h"
#include "kernels/transpose_tile.cuh"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

constexpr int kRowThreads = 256;

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

// The row's elements [i * W, i * W + W) for pack i (W = 1 without 16-byte loads), in float32 and
// times the column scales when there are any.
template <typename T, int W>
struct RowPack {
  using Raw = std::conditional_t<(W > 1), typename Vec<T>::Pack, T>;
  float v[W];
  __device__ static Raw load(const T* row, int64_t i) {
    if constexpr (W > 1) {
      return Vec<T>::load(row + i * W);
    } else {
      return row[i];
    }
  }
  __device__ RowPack(const Raw& raw, const float* column_scale, int64_t i) {
    if constexpr (W > 1) {
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] = static_cast<float>(raw.v[j]);
    } else {
      v[0] = static_cast<float>(raw);
    }
    if (!column_scale) return;
    if constexpr (W % 4 == 0) {
      // 16-byte loads: one float per thread at a stride of W floats touched W times the sectors.
#pragma unroll
      for (int q = 0; q < W / 4; ++q) {
        const float4 s = reinterpret_cast<const float4*>(column_scale + i * W)[q];
        v[4 * q] *= s.x;
        v[4 * q + 1] *= s.y;
        v[4 * q + 2] *= s.z;
        v[4 * q + 3] *= s.w;
      }
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) v[j] *= column_scale[i * W + j];
    }
  }
  __device__ float amax() const {
    float m = 0.f;
#pragma unroll
    for (int j = 0; j < W; ++j) m = fmaxf(m, fabsf(v[j]));
    return m;
  }
  // The W values times `inv` in E4M3, stored with one W-byte access.
  __device__ void store(__nv_fp8_storage_t* out, int64_t i, float inv) const {
    struct alignas(W) Bytes {
      __nv_fp8_storage_t b[W];
    } bytes;
#pragma unroll
    for (int j = 0; j < W; ++j) bytes.b[j] = to_e4m3(v[j] * inv);
    *reinterpret_cast<Bytes*>(out + i * W) = bytes;
  }
};

// Packs a thread keeps in registers between the two passes over a row: rows up to
// kRowThreads * kCachedPacks * W values (16,384 bf16, Llama-3.1-8B's widest is 14,336) are read
// from memory once; wider ones are read again in the second pass (from L2, mostly).
constexpr int kCachedPacks = 8;

template <typename T, int W, bool kCached>
__global__ void quantize_rows_kernel(const T* __restrict__ x,
                                     const float* __restrict__ column_scale,
                                     __nv_fp8_storage_t* __restrict__ values,
                                     float* __restrict__ scales, int64_t cols) {
  using Pack = RowPack<T, W>;
  const int64_t row = blockIdx.x;
  const T* in = x + row * cols;
  __nv_fp8_storage_t* out = values + row * cols;
  const int64_t packs = cols / W;
  float amax = 0.f;
  typename Pack::Raw cache[kCached ? kCachedPacks : 1];
  if constexpr (kCached) {
#pragma unroll
    for (int c = 0; c < kCachedPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kRowThreads;
      if (i < packs) {
        cache[c] = Pack::load(in, i);
        amax = fmaxf(amax, Pack(cache[c], column_scale, i).amax());
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < packs; i += kRowThreads)
      amax = fmaxf(amax, Pack(Pack::load(in, i), column_scale, i).amax());
  }
  amax = fmaxf(block_max(amax), kFp8MinAmax);
  const float inv = kFp8Max / amax;
  if constexpr (kCached) {
#pragma unroll
    for (int c = 0; c < kCachedPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kRowThreads;
      if (i < packs) Pack(cache[c], column_scale, i).store(out, i, inv);
    }
  } else {
    for (int64_t i = threadIdx.x; i < packs; i += kRowThreads)
      Pack(Pack::load(in, i), column_scale, i).store(out, i, inv);
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
        // of the pack and the tensors themselves are aligned.
        const bool scales_aligned = reinterpret_cast<std::uintptr_t>(csp) % 16 == 0;
        float* sp = scales.data_ptr<float>();
        if (!Vec<scalar_t>::usable(cols, xp) || !scales_aligned)
          quantize_rows_kernel<scalar_t, 1, false>
              <<<rows, kRowThreads, 0, stream>>>(xp, csp, vp, sp, cols);
        else if (cols <= int64_t(kRowThreads) * kCachedPacks * kW)
          quantize_rows_kernel<scalar_t, kW, true>
              <<<rows, kRowThreads, 0, stream>>>(xp, csp, vp, sp, cols);
        else
          quantize_rows_kernel<scalar_t, kW, false>
              <<<rows, kRowThreads, 0, stream>>>(xp, csp, vp, sp, cols);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {values, scales};
}

__global__ void transpose_bytes_kernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                                       int64_t rows, int64_t cols) {
  __shared__ tile::Tile t;
  const int64_t r0 = int64_t(blockIdx.y) * tile::kTile, c0 = int64_t(blockIdx.x) * tile::kTile;
  for (int i = tile::first_row(); i < tile::kTile; i += tile::kRowsPerPass) {
    const int64_t r = r0 + i, c = c0 + tile::word() * 4;
    if (r < rows && c < cols)
      *reinterpret_cast<uint32_t*>(&t.bytes[i][tile::word() * 4]) =
          *reinterpret_cast<const uint32_t*>(in + r * cols + c);
  }
  __syncthreads();
  tile::store_transposed(t, out, r0, c0, rows, cols);
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
  const dim3 grid((cols + tile::kTile - 1) / tile::kTile, (rows + tile::kTile - 1) / tile::kTile);
  transpose_bytes_kernel<<<grid, tile::kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
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
