// CUDA implementation of kubetune::rope_rotate: one thread per run of frequencies of one head,
// 16-byte accesses where head_dim allows, arithmetic in fp32.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "kernels/launch.cuh"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

// W consecutive values of one row, as a 16-byte pack (W = Vec<T>::kWidth) or one scalar (W = 1).
template <typename T, int W>
struct Run {
  T v[W];
  __device__ static Run load(const T* p) {
    Run r;
    if constexpr (W == Vec<T>::kWidth) {
      auto pack = Vec<T>::load(p);
#pragma unroll
      for (int j = 0; j < W; ++j) r.v[j] = pack.v[j];
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) r.v[j] = p[j];
    }
    return r;
  }
  __device__ void store(T* p) const {
    if constexpr (W == Vec<T>::kWidth) {
      typename Vec<T>::Pack pack;
#pragma unroll
      for (int j = 0; j < W; ++j) pack.v[j] = v[j];
      Vec<T>::store(p, pack);
    } else {
#pragma unroll
      for (int j = 0; j < W; ++j) p[j] = v[j];
    }
  }
};

// x, out: [rows, heads, 2 * half]; cos, sin: [rows, 2 * half]. One thread: W frequencies
// [i, i + W) of one head of one row, both halves. The formula is rope.cpp's.
template <typename T, typename C, int W, bool kInverse>
__global__ void rope_kernel(const T* __restrict__ x, const C* __restrict__ cos,
                            const C* __restrict__ sin, T* __restrict__ out, int64_t rows,
                            int64_t heads, int64_t half) {
  const int64_t runs_per_head = half / W;
  const int64_t total = rows * heads * runs_per_head;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = (t % runs_per_head) * W;
    const int64_t row_head = t / runs_per_head;
    const int64_t row = row_head / heads;
    const T* xr = x + row_head * 2 * half;
    const C* cr = cos + row * 2 * half;
    const C* sr = sin + row * 2 * half;
    const auto x1 = Run<T, W>::load(xr + i), x2 = Run<T, W>::load(xr + half + i);
    const auto c1 = Run<C, W>::load(cr + i), c2 = Run<C, W>::load(cr + half + i);
    const auto s1 = Run<C, W>::load(sr + i), s2 = Run<C, W>::load(sr + half + i);
    Run<T, W> o1, o2;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float a = static_cast<float>(x1.v[j]), b = static_cast<float>(x2.v[j]);
      const float cc1 = static_cast<float>(c1.v[j]), cc2 = static_cast<float>(c2.v[j]);
      const float ss1 = static_cast<float>(s1.v[j]), ss2 = static_cast<float>(s2.v[j]);
      if constexpr (kInverse) {
        o1.v[j] = static_cast<T>(a * cc1 + b * ss2);
        o2.v[j] = static_cast<T>(b * cc2 - a * ss1);
      } else {
        o1.v[j] = static_cast<T>(a * cc1 - b * ss1);
        o2.v[j] = static_cast<T>(b * cc2 + a * ss2);
      }
    }
    o1.store(out + row_head * 2 * half + i);
    o2.store(out + row_head * 2 * half + half + i);
  }
}

template <typename T, typename C, int W>
void launch(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor& out,
            bool inverse) {
  const int64_t rows = x.size(0) * x.size(1), heads = x.size(2), half = x.size(3) / 2;
  const int blocks = blocks_for(rows * heads * (half / W));
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto* xp = x.data_ptr<T>();
  const auto *cp = cos.data_ptr<C>(), *sp = sin.data_ptr<C>();
  auto* op = out.data_ptr<T>();
  if (inverse)
    rope_kernel<T, C, W, true><<<blocks, kThreads, 0, stream>>>(xp, cp, sp, op, rows, heads, half);
  else
    rope_kernel<T, C, W, false><<<blocks, kThreads, 0, stream>>>(xp, cp, sp, op, rows, heads, half);
}

at::Tensor rope_rotate_cuda(const at::Tensor& x_in, const at::Tensor& cos_in,
                            const at::Tensor& sin_in, bool inverse) {
  c10::cuda::CUDAGuard guard(x_in.device());
  auto x = x_in.contiguous();
  // cos and sin stay in their own precision: fp32 ones (a model kept in fp32 under autocast)
  // meet bf16 heads in fp32 arithmetic, as transformers' broadcast products do.
  const bool same_dtype = cos_in.scalar_type() == x.scalar_type();
  auto cos = (same_dtype ? cos_in : cos_in.to(at::kFloat)).contiguous();
  auto sin = (same_dtype ? sin_in : sin_in.to(at::kFloat)).contiguous();
  auto out = at::empty_like(x);
  if (x.numel() == 0) return out;
  const int64_t half = x.size(3) / 2;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rope_rotate", [&] {
    constexpr int W = Vec<scalar_t>::kWidth;
    const bool packs =
        half % W == 0 && Vec<scalar_t>::usable(W, x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>());
    if (same_dtype && packs &&
        Vec<scalar_t>::usable(W, cos.data_ptr<scalar_t>(), sin.data_ptr<scalar_t>()))
      launch<scalar_t, scalar_t, W>(x, cos, sin, out, inverse);
    else if (same_dtype)
      launch<scalar_t, scalar_t, 1>(x, cos, sin, out, inverse);
    else if (packs && Vec<float>::usable(W, cos.data_ptr<float>(), sin.data_ptr<float>()))
      launch<scalar_t, float, W>(x, cos, sin, out, inverse);
    else
      launch<scalar_t, float, 1>(x, cos, sin, out, inverse);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) { m.impl("rope_rotate", rope_rotate_cuda); }

}  // namespace kubetune::kernels
