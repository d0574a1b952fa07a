// CUDA implementation of kubetune::rms_norm_forward and kubetune::rms_norm_backward: a warp per
// row, 16-byte accesses (rows are a multiple of 16 bytes: rms_norm_frozen_supported), sums in fp32.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "kernels/launch.cuh"
#include "kernels/rms_norm.h"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

constexpr int kWarp = 32, kRowsPerBlock = kThreads / kWarp;

__device__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The rows this thread's warp takes, grid-stride.
struct Rows {
  int64_t first, step;
  __device__ Rows()
      : first(int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp),
        step(int64_t(gridDim.x) * kRowsPerBlock) {}
};

template <typename T>
__global__ void rms_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                        T* __restrict__ y, float* __restrict__ rstd, int64_t rows,
                                        int d, float eps) {
  using V = Vec<T>;
  constexpr int W = V::kWidth;
  const int lane = threadIdx.x % kWarp;
  const Rows it;
  for (int64_t r = it.first; r < rows; r += it.step) {
    const T* xr = x + r * d;
    float squares = 0;
    for (int c = lane * W; c < d; c += kWarp * W) {
      const auto p = V::load(xr + c);
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float v = static_cast<float>(p.v[j]);
        squares += v * v;
      }
    }
    const float inv = rsqrtf(warp_sum(squares) / d + eps);
    if (lane == 0) rstd[r] = inv;
    for (int c = lane * W; c < d; c += kWarp * W) {
      const auto p = V::load(xr + c), g = V::load(w + c);
      typename V::Pack out;
#pragma unroll
      for (int j = 0; j < W; ++j)
        out.v[j] = static_cast<T>(static_cast<float>(p.v[j]) * inv * static_cast<float>(g.v[j]));
      V::store(y + r * d + c, out);
    }
  }
}

template <typename T>
__global__ void rms_norm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                         const T* __restrict__ w, const float* __restrict__ rstd,
                                         T* __restrict__ dx, int64_t rows, int d) {
  using V = Vec<T>;
  constexpr int W = V::kWidth;
  const int lane = threadIdx.x % kWarp;
  const Rows it;
  for (int64_t r = it.first; r < rows; r += it.step) {
    const T *dyr = dy + r * d, *xr = x + r * d;
    float dot = 0;  // sum of dy * w * x over the row
    for (int c = lane * W; c < d; c += kWarp * W) {
      const auto a = V::load(dyr + c), b = V::load(xr + c), g = V::load(w + c);
#pragma unroll
      for (int j = 0; j < W; ++j)
        dot += static_cast<float>(a.v[j]) * static_cast<float>(g.v[j]) * static_cast<float>(b.v[j]);
    }
    const float inv = rstd[r];
    const float k = warp_sum(dot) / d * inv * inv;
    for (int c = lane * W; c < d; c += kWarp * W) {
      const auto a = V::load(dyr + c), b = V::load(xr + c), g = V::load(w + c);
      typename V::Pack out;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float grad = static_cast<float>(a.v[j]) * static_cast<float>(g.v[j]);
        out.v[j] = static_cast<T>(inv * (grad - static_cast<float>(b.v[j]) * k));
      }
      V::store(dx + r * d + c, out);
    }
  }
}

int blocks_for_rows(int64_t rows) { return blocks_for(rows * kWarp); }

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cuda(const at::Tensor& x,
                                                         const at::Tensor& weight, double eps) {
  c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous(), wc = weight.contiguous();
  const int64_t d = xc.size(-1), rows = d ? xc.numel() / d : 0;
  auto y = at::empty_like(xc);
  auto rstd = at::empty({rows}, xc.options().dtype(at::kFloat));
  if (rows == 0) return {y, rstd};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "rms_norm", [&] {
    TORCH_CHECK(Vec<scalar_t>::usable(d, xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>()),
                "rms_norm: rows must be a multiple of 16 bytes");
    rms_norm_forward_kernel<scalar_t>
        <<<blocks_for_rows(rows), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            rstd.data_ptr<float>(), rows, static_cast<int>(d), static_cast<float>(eps));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {y, rstd};
}

at::Tensor rms_norm_backward_cuda(const at::Tensor& grad, const at::Tensor& x,
                                  const at::Tensor& weight, const at::Tensor& rstd) {
  c10::cuda::CUDAGuard guard(x.device());
  const auto dy = grad.contiguous(), xc = x.contiguous(), wc = weight.contiguous();
  const int64_t d = xc.size(-1), rows = d ? xc.numel() / d : 0;
  auto dx = at::empty_like(xc);
  if (rows == 0) return dx;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "rms_norm", [&] {
    TORCH_CHECK(Vec<scalar_t>::usable(d, xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(),
                                      dy.data_ptr<scalar_t>()),
                "rms_norm: rows must be a multiple of 16 bytes");
    rms_norm_backward_kernel<scalar_t>
        <<<blocks_for_rows(rows), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            dy.data_ptr<scalar_t>(), xc.data_ptr<scalar_t>(), wc.data_ptr<scalar_t>(),
            rstd.contiguous().data_ptr<float>(), dx.data_ptr<scalar_t>(), rows,
            static_cast<int>(d));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return dx;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("rms_norm_forward", rms_norm_forward_cuda);
  m.impl("rms_norm_backward", rms_norm_backward_cuda);
}

}  // namespace kubetune::kernels
