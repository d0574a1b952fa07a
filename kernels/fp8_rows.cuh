// Device helpers of the FP8 row quantization (kernels/fp8.h), shared by the kernels that write it:
// the quantization itself (fp8_cuda.cu) and the SwiGLU kernels that quantize their own output
// (swiglu_fp8_cuda.cu). One definition of the arithmetic, so every writer makes the same bytes:
// float32, no fast math, amax / 448 and 448 / amax as true divisions.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/fp8.h"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {

// The largest of `v` over a block of kThreads threads (a multiple of 32), returned to all of them,
// with one barrier. A kernel that reduces once per row in a loop alternates `parity` (0, 1, 0,
// ...): an iteration's writes then go to the slots the last one did not read, and the barrier of
// the iteration in between keeps the one before from being overwritten while still read.
template <int kThreads>
__device__ float block_max(float v, int parity = 0) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
  constexpr int kWarps = kThreads / 32;
  __shared__ float warp_max[2][kWarps];
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warp_max[parity][threadIdx.x / 32] = v;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kWarps; ++w) v = fmaxf(v, warp_max[parity][w]);
  return v;
}

__device__ inline __nv_fp8_storage_t to_e4m3(float v) {
  return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
}

// A row's scale and the factor its values are multiplied by, from its largest magnitude.
struct RowScale {
  float amax;
  __device__ explicit RowScale(float row_amax) : amax(fmaxf(row_amax, kFp8MinAmax)) {}
  __device__ float inverse() const { return kFp8Max / amax; }
  __device__ float scale() const { return amax / kFp8Max; }
};

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

}  // namespace kubetune::kernels
