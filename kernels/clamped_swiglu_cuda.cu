// CUDA implementation of kubetune::clamped_swiglu_{forward,backward}: one elementwise pass each,
// gate and up read as one pair of adjacent values, arithmetic in fp32.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "kernels/clamped_swiglu.h"
#include "kernels/launch.cuh"

namespace kubetune::kernels {
namespace {

struct Clamp {
  float alpha, limit;
};

// Output i of n: gate_up[2 i] is its gate, gate_up[2 i + 1] its up (gate_up's rows are 2 * width
// wide and the output's width, so the pairs of consecutive rows follow each other).
template <typename T>
__global__ void forward_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int64_t n,
                               Clamp c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const float g = fminf(static_cast<float>(gate_up[2 * i]), c.limit);
    const float u = fminf(fmaxf(static_cast<float>(gate_up[2 * i + 1]), -c.limit), c.limit);
    out[i] = static_cast<T>((u + 1.f) * g / (1.f + __expf(-c.alpha * g)));
  }
}

template <typename T>
__global__ void backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate_up,
                                T* __restrict__ d_gate_up, int64_t n, Clamp c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const float gate = static_cast<float>(gate_up[2 * i]);
    const float up = static_cast<float>(gate_up[2 * i + 1]);
    const float dy = static_cast<float>(grad[i]);
    const float g = fminf(gate, c.limit), u = fminf(fmaxf(up, -c.limit), c.limit);
    const float s = 1.f / (1.f + __expf(-c.alpha * g));
    const float d_up = (up >= -c.limit && up <= c.limit) ? dy * g * s : 0.f;
    const float d_gate = gate <= c.limit ? dy * (u + 1.f) * (s + g * c.alpha * s * (1.f - s)) : 0.f;
    d_gate_up[2 * i] = static_cast<T>(d_gate);
    d_gate_up[2 * i + 1] = static_cast<T>(d_up);
  }
}

at::Tensor forward_cuda(const at::Tensor& gate_up, double alpha, double limit) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  auto sizes = gate_up.sizes().vec();
  sizes.back() /= 2;
  at::Tensor out = at::empty(sizes, gate_up.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const Clamp c{static_cast<float>(alpha), static_cast<float>(limit)};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, gate_up.scalar_type(), "clamped_swiglu_forward", [&] {
        forward_kernel<scalar_t><<<blocks_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            gate_up.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n, c);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

at::Tensor backward_cuda(const at::Tensor& grad, const at::Tensor& gate_up, double alpha,
                         double limit) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  TORCH_CHECK(grad.numel() * 2 == gate_up.numel(), "clamped SwiGLU: grad does not fit gate_up");
  at::Tensor d_gate_up = at::empty_like(gate_up);
  const int64_t n = grad.numel();
  if (n == 0) return d_gate_up;
  const at::Tensor g = grad.to(gate_up.scalar_type()).contiguous();
  const Clamp c{static_cast<float>(alpha), static_cast<float>(limit)};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, gate_up.scalar_type(), "clamped_swiglu_backward", [&] {
        backward_kernel<scalar_t><<<blocks_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            g.data_ptr<scalar_t>(), gate_up.data_ptr<scalar_t>(), d_gate_up.data_ptr<scalar_t>(), n,
            c);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return d_gate_up;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("clamped_swiglu_forward", forward_cuda);
  m.impl("clamped_swiglu_backward", backward_cuda);
}

}  // namespace kubetune::kernels
