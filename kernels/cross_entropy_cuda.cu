// CUDA implementation of kubetune::logsumexp_target and kubetune::cross_entropy_backward_: one
// block per row of logits, 16-byte loads where the row allows, fp32 arithmetic.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cmath>

#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

constexpr int kThreads = 512;

// A running logsumexp: the maximum seen and the sum of exp(x - max).
struct MaxSum {
  float max, sum;
};

__device__ MaxSum add_value(MaxSum a, float x) {
  if (x > a.max) return {x, a.sum * __expf(a.max - x) + 1.f};
  return {a.max, a.sum + __expf(x - a.max)};
}

__device__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.f};
  return {m, a.sum * __expf(a.max - m) + b.sum * __expf(b.max - m)};
}

__device__ MaxSum block_reduce(MaxSum v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    MaxSum other{__shfl_down_sync(0xffffffff, v.max, offset),
                 __shfl_down_sync(0xffffffff, v.sum, offset)};
    v = combine(v, other);
  }
  __shared__ MaxSum per_warp[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) per_warp[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? per_warp[lane] : MaxSum{-INFINITY, 0.f};
    for (int offset = 16; offset > 0; offset /= 2) {
      MaxSum other{__shfl_down_sync(0xffffffff, v.max, offset),
                   __shfl_down_sync(0xffffffff, v.sum, offset)};
      v = combine(v, other);
    }
  }
  return v;  // valid in thread 0
}

template <typename T, bool kVectorized>
__global__ void logsumexp_target_kernel(const T* __restrict__ logits,
                                        const int64_t* __restrict__ targets,
                                        float* __restrict__ lse, float* __restrict__ picked,
                                        int64_t vocab) {
  const T* row = logits + blockIdx.x * vocab;
  MaxSum acc{-INFINITY, 0.f};
  if constexpr (kVectorized) {
    constexpr int W = Vec<T>::kWidth;
    for (int64_t i = int64_t(threadIdx.x) * W; i < vocab; i += int64_t(blockDim.x) * W) {
      const auto pack = Vec<T>::load(row + i);
#pragma unroll
      for (int j = 0; j < W; ++j) acc = add_value(acc, static_cast<float>(pack.v[j]));
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
      acc = add_value(acc, static_cast<float>(row[i]));
  }
  acc = block_reduce(acc);
  if (threadIdx.x == 0) {
    lse[blockIdx.x] = acc.max + logf(acc.sum);
    picked[blockIdx.x] = static_cast<float>(row[targets[blockIdx.x]]);
  }
}

template <typename T, bool kVectorized>
__global__ void cross_entropy_backward_kernel(T* __restrict__ logits, const float* __restrict__ lse,
                                              const int64_t* __restrict__ targets,
                                              const float* __restrict__ grad_scale, int64_t vocab) {
  T* row = logits + blockIdx.x * vocab;
  const float row_lse = lse[blockIdx.x], g = *grad_scale;
  const int64_t target = targets[blockIdx.x];
  auto grad = [&](float x, int64_t column) {
    return g * (__expf(x - row_lse) - (column == target ? 1.f : 0.f));
  };
  if constexpr (kVectorized) {
    constexpr int W = Vec<T>::kWidth;
    for (int64_t i = int64_t(threadIdx.x) * W; i < vocab; i += int64_t(blockDim.x) * W) {
      auto pack = Vec<T>::load(row + i);
#pragma unroll
      for (int j = 0; j < W; ++j)
        pack.v[j] = static_cast<T>(grad(static_cast<float>(pack.v[j]), i + j));
      Vec<T>::store(row + i, pack);
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x)
      row[i] = static_cast<T>(grad(static_cast<float>(row[i]), i));
  }
}

void check_cuda(const at::Tensor& logits, const at::Tensor& targets) {
  TORCH_CHECK(targets.is_cuda() && targets.device() == logits.device(),
              "cross entropy: targets must be on the logits' device");
}

std::tuple<at::Tensor, at::Tensor> logsumexp_target_cuda(const at::Tensor& logits,
                                                         const at::Tensor& targets) {
  check_cuda(logits, targets);
  c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  auto lse = at::empty({rows}, logits.options().dtype(at::kFloat));
  auto picked = at::empty({rows}, logits.options().dtype(at::kFloat));
  if (rows == 0) return {lse, picked};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, logits.scalar_type(), "logsumexp_target", [&] {
        const auto* x = logits.data_ptr<scalar_t>();
        auto launch = [&](auto kernel) {
          kernel<<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              x, targets.data_ptr<int64_t>(), lse.data_ptr<float>(), picked.data_ptr<float>(),
              vocab);
        };
        if (Vec<scalar_t>::usable(vocab, x))
          launch(logsumexp_target_kernel<scalar_t, true>);
        else
          launch(logsumexp_target_kernel<scalar_t, false>);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {lse, picked};
}

at::Tensor cross_entropy_backward_cuda(at::Tensor logits, const at::Tensor& lse,
                                       const at::Tensor& targets, const at::Tensor& grad_scale) {
  check_cuda(logits, targets);
  TORCH_CHECK(lse.is_cuda() && grad_scale.is_cuda(),
              "cross_entropy_backward_: lse and grad_scale must be on the GPU");
  c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0), vocab = logits.size(1);
  if (rows == 0) return logits;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, logits.scalar_type(), "cross_entropy_backward_", [&] {
        auto* x = logits.data_ptr<scalar_t>();
        auto launch = [&](auto kernel) {
          kernel<<<rows, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
              x, lse.data_ptr<float>(), targets.data_ptr<int64_t>(), grad_scale.data_ptr<float>(),
              vocab);
        };
        if (Vec<scalar_t>::usable(vocab, x))
          launch(cross_entropy_backward_kernel<scalar_t, true>);
        else
          launch(cross_entropy_backward_kernel<scalar_t, false>);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return logits;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("logsumexp_target", logsumexp_target_cuda);
  m.impl("cross_entropy_backward_", cross_entropy_backward_cuda);
}

}  // namespace kubetune::kernels
