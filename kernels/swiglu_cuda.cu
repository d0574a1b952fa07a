// CUDA implementation of kubetune::swiglu_forward / swiglu_backward: one elementwise pass each,
// 16-byte loads in the storage dtype (bf16/fp16/fp32) where the tensors allow, arithmetic in fp32.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "kernels/launch.cuh"
#include "kernels/swiglu_math.cuh"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

// kVectorized: `n` counts 16-byte packs, not elements.
template <typename T, bool kVectorized>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                      T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    if constexpr (kVectorized) {
      constexpr int W = Vec<T>::kWidth;
      const auto g = Vec<T>::load(gate + i * W), u = Vec<T>::load(up + i * W);
      typename Vec<T>::Pack o;
#pragma unroll
      for (int j = 0; j < W; ++j)
        o.v[j] = static_cast<T>(silu_times(static_cast<float>(g.v[j]), static_cast<float>(u.v[j])));
      Vec<T>::store(out + i * W, o);
    } else {
      out[i] = static_cast<T>(silu_times(static_cast<float>(gate[i]), static_cast<float>(up[i])));
    }
  }
}

// kWithOutput: also writes silu(gate) * up to `out` (recomputed instead of kept from forward).
template <typename T, bool kVectorized, bool kWithOutput>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                       const T* __restrict__ up, T* __restrict__ d_gate,
                                       T* __restrict__ d_up, T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    float dg, du;
    if constexpr (kVectorized) {
      constexpr int W = Vec<T>::kWidth;
      const auto dy = Vec<T>::load(grad + i * W), g = Vec<T>::load(gate + i * W),
                 u = Vec<T>::load(up + i * W);
      typename Vec<T>::Pack out_g, out_u, out_y;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float gf = static_cast<float>(g.v[j]), uf = static_cast<float>(u.v[j]);
        swiglu_grads(static_cast<float>(dy.v[j]), gf, uf, dg, du);
        out_g.v[j] = static_cast<T>(dg);
        out_u.v[j] = static_cast<T>(du);
        if constexpr (kWithOutput) out_y.v[j] = static_cast<T>(silu_times(gf, uf));
      }
      Vec<T>::store(d_gate + i * W, out_g);
      Vec<T>::store(d_up + i * W, out_u);
      if constexpr (kWithOutput) Vec<T>::store(out + i * W, out_y);
    } else {
      const float gf = static_cast<float>(gate[i]), uf = static_cast<float>(up[i]);
      swiglu_grads(static_cast<float>(grad[i]), gf, uf, dg, du);
      d_gate[i] = static_cast<T>(dg);
      d_up[i] = static_cast<T>(du);
      if constexpr (kWithOutput) out[i] = static_cast<T>(silu_times(gf, uf));
    }
  }
}

at::Tensor swiglu_forward_cuda(const at::Tensor& gate, const at::Tensor& up) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto g = gate.contiguous(), u = up.contiguous();
  auto out = at::empty_like(g);
  const int64_t n = g.numel();
  if (n == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, g.scalar_type(), "swiglu_forward", [&] {
    const auto *gp = g.data_ptr<scalar_t>(), *up_ = u.data_ptr<scalar_t>();
    auto* op = out.data_ptr<scalar_t>();
    const auto stream = at::cuda::getCurrentCUDAStream();
    if (Vec<scalar_t>::usable(n, gp, up_, op)) {
      const int64_t packs = n / Vec<scalar_t>::kWidth;
      swiglu_forward_kernel<scalar_t, true>
          <<<blocks_for(packs), kThreads, 0, stream>>>(gp, up_, op, packs);
    } else {
      swiglu_forward_kernel<scalar_t, false>
          <<<blocks_for(n), kThreads, 0, stream>>>(gp, up_, op, n);
    }
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

// d_gate, d_up and, when `out` is defined, the recomputed output.
void swiglu_backward_into(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up,
                          at::Tensor& d_gate, at::Tensor& d_up, at::Tensor* out) {
  const int64_t n = gate.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, gate.scalar_type(), "swiglu_backward", [&] {
        const auto *dyp = grad.data_ptr<scalar_t>(), *gp = gate.data_ptr<scalar_t>(),
                   *up_ = up.data_ptr<scalar_t>();
        auto *dgp = d_gate.data_ptr<scalar_t>(), *dup = d_up.data_ptr<scalar_t>();
        scalar_t* op = out ? out->data_ptr<scalar_t>() : dgp;  // unused without an output
        const auto stream = at::cuda::getCurrentCUDAStream();
        const bool vec = Vec<scalar_t>::usable(n, dyp, gp, up_, dgp, dup, op);
        const int64_t count = vec ? n / Vec<scalar_t>::kWidth : n;
        const int blocks = blocks_for(count);
        if (vec && out)
          swiglu_backward_kernel<scalar_t, true, true>
              <<<blocks, kThreads, 0, stream>>>(dyp, gp, up_, dgp, dup, op, count);
        else if (vec)
          swiglu_backward_kernel<scalar_t, true, false>
              <<<blocks, kThreads, 0, stream>>>(dyp, gp, up_, dgp, dup, op, count);
        else if (out)
          swiglu_backward_kernel<scalar_t, false, true>
              <<<blocks, kThreads, 0, stream>>>(dyp, gp, up_, dgp, dup, op, count);
        else
          swiglu_backward_kernel<scalar_t, false, false>
              <<<blocks, kThreads, 0, stream>>>(dyp, gp, up_, dgp, dup, op, count);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward_cuda(const at::Tensor& grad,
                                                        const at::Tensor& gate,
                                                        const at::Tensor& up) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto dy = grad.contiguous(), g = gate.contiguous(), u = up.contiguous();
  auto d_gate = at::empty_like(g), d_up = at::empty_like(u);
  swiglu_backward_into(dy, g, u, d_gate, d_up, nullptr);
  return {d_gate, d_up};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> swiglu_backward_with_output_cuda(
    const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto dy = grad.contiguous(), g = gate.contiguous(), u = up.contiguous();
  auto d_gate = at::empty_like(g), d_up = at::empty_like(u), out = at::empty_like(g);
  swiglu_backward_into(dy, g, u, d_gate, d_up, &out);
  return {d_gate, d_up, out};
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("swiglu_forward", swiglu_forward_cuda);
  m.impl("swiglu_backward", swiglu_backward_cuda);
  m.impl("swiglu_backward_with_output", swiglu_backward_with_output_cuda);
}

}  // namespace kubetune::kernels
