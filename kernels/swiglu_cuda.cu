// CUDA implementation of kubetune::swiglu_forward / swiglu_backward: one elementwise pass each,
// loads in the storage dtype (bf16/fp16/fp32), arithmetic in fp32.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace kubetune::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                      T* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const float g = static_cast<float>(gate[i]);
    const float s = 1.f / (1.f + __expf(-g));
    out[i] = static_cast<T>(g * s * static_cast<float>(up[i]));
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                       const T* __restrict__ up, T* __restrict__ d_gate,
                                       T* __restrict__ d_up, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const float g = static_cast<float>(gate[i]);
    const float u = static_cast<float>(up[i]);
    const float dy = static_cast<float>(grad[i]);
    const float s = 1.f / (1.f + __expf(-g));
    d_up[i] = static_cast<T>(dy * g * s);
    d_gate[i] = static_cast<T>(dy * u * s * (1.f + g * (1.f - s)));
  }
}

int blocks_for(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 32;
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, cap)));
}

at::Tensor swiglu_forward_cuda(const at::Tensor& gate, const at::Tensor& up) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto g = gate.contiguous(), u = up.contiguous();
  auto out = at::empty_like(g);
  const int64_t n = g.numel();
  if (n == 0) return out;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, g.scalar_type(), "swiglu_forward", [&] {
    swiglu_forward_kernel<scalar_t>
        <<<blocks_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            g.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward_cuda(const at::Tensor& grad,
                                                        const at::Tensor& gate,
                                                        const at::Tensor& up) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto dy = grad.contiguous(), g = gate.contiguous(), u = up.contiguous();
  auto d_gate = at::empty_like(g), d_up = at::empty_like(u);
  const int64_t n = g.numel();
  if (n == 0) return {d_gate, d_up};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, g.scalar_type(), "swiglu_backward", [&] {
        swiglu_backward_kernel<scalar_t>
            <<<blocks_for(n), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
                dy.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(),
                d_gate.data_ptr<scalar_t>(), d_up.data_ptr<scalar_t>(), n);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {d_gate, d_up};
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("swiglu_forward", swiglu_forward_cuda);
  m.impl("swiglu_backward", swiglu_backward_cuda);
}

}  // namespace kubetune::kernels
