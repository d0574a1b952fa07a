// CUDA implementation of the kubetune::gated_* ops: one elementwise pass each, 16-byte loads in
// the storage dtype (bf16/fp16/fp32) where the tensors allow, arithmetic in fp32.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "kernels/launch.cuh"
#include "kernels/swiglu.h"
#include "kernels/swiglu_math.cuh"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

// Where the inputs of output element (row r, column c) live: gate[r * stride + c] and
// up[r * stride + c]. Separate tensors have stride == width; gate and up packed side by side in
// one [rows, 2 * width] tensor have stride 2 * width (and `up` is gate + width). All three count
// elements, or 16-byte packs in the vectorized kernels. The input gradients are laid out as the
// inputs.
struct Layout {
  int64_t n, width, stride;
  __device__ int64_t input_index(int64_t i) const {
    return width == stride ? i : (i / width) * stride + i % width;
  }
};

template <typename T, typename Act, bool kVectorized>
__global__ void gated_forward_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                                     T* __restrict__ out, Layout layout) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < layout.n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t k = layout.input_index(i);
    if constexpr (kVectorized) {
      constexpr int W = Vec<T>::kWidth;
      const auto g = Vec<T>::load(gate + k * W), u = Vec<T>::load(up + k * W);
      typename Vec<T>::Pack o;
#pragma unroll
      for (int j = 0; j < W; ++j)
        o.v[j] = static_cast<T>(Act::times(static_cast<float>(g.v[j]), static_cast<float>(u.v[j])));
      Vec<T>::store(out + i * W, o);
    } else {
      out[i] = static_cast<T>(Act::times(static_cast<float>(gate[k]), static_cast<float>(up[k])));
    }
  }
}

// kWithOutput: also writes act(gate) * up to `out` (recomputed instead of kept from forward).
template <typename T, typename Act, bool kVectorized, bool kWithOutput>
__global__ void gated_backward_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                      const T* __restrict__ up, T* __restrict__ d_gate,
                                      T* __restrict__ d_up, T* __restrict__ out, Layout layout) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < layout.n;
       i += int64_t(blockDim.x) * gridDim.x) {
    const int64_t k = layout.input_index(i);
    float dg, du;
    if constexpr (kVectorized) {
      constexpr int W = Vec<T>::kWidth;
      const auto dy = Vec<T>::load(grad + i * W), g = Vec<T>::load(gate + k * W),
                 u = Vec<T>::load(up + k * W);
      typename Vec<T>::Pack out_g, out_u, out_y;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const float gf = static_cast<float>(g.v[j]), uf = static_cast<float>(u.v[j]);
        Act::grads(static_cast<float>(dy.v[j]), gf, uf, dg, du);
        out_g.v[j] = static_cast<T>(dg);
        out_u.v[j] = static_cast<T>(du);
        if constexpr (kWithOutput) out_y.v[j] = static_cast<T>(Act::times(gf, uf));
      }
      Vec<T>::store(d_gate + k * W, out_g);
      Vec<T>::store(d_up + k * W, out_u);
      if constexpr (kWithOutput) Vec<T>::store(out + i * W, out_y);
    } else {
      const float gf = static_cast<float>(gate[k]), uf = static_cast<float>(up[k]);
      Act::grads(static_cast<float>(grad[i]), gf, uf, dg, du);
      d_gate[k] = static_cast<T>(dg);
      d_up[k] = static_cast<T>(du);
      if constexpr (kWithOutput) out[i] = static_cast<T>(Act::times(gf, uf));
    }
  }
}

// Calls f(Act{}) with the activation type `act` names.
template <typename F>
void with_activation(int64_t act, F&& f) {
  if (act == static_cast<int64_t>(GateActivation::kGeluTanh))
    f(GeluTanhGate{});
  else
    f(SiluGate{});
}

// The kernels' layout for `count` outputs `width` wide, inputs `stride` apart; vectorized when
// widths, strides and every pointer allow 16-byte accesses.
template <typename T, typename... Ptrs>
Layout layout_for(int64_t count, int64_t width, int64_t stride, bool& vectorized,
                  const Ptrs*... ptrs) {
  constexpr int W = Vec<T>::kWidth;
  vectorized = width % W == 0 && stride % W == 0 && Vec<T>::usable(count, ptrs...);
  return vectorized ? Layout{count / W, width / W, stride / W} : Layout{count, width, stride};
}

// out = act(gate) * up for gate and up `stride` apart (see Layout).
void gated_forward_into(const at::Tensor& like, const void* gate, const void* up, at::Tensor& out,
                        int64_t width, int64_t stride, int64_t act) {
  const int64_t n = out.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, like.scalar_type(), "gated_forward", [&] {
        const auto* gp = static_cast<const scalar_t*>(gate);
        const auto* upp = static_cast<const scalar_t*>(up);
        auto* op = out.data_ptr<scalar_t>();
        bool vec = false;
        const Layout layout = layout_for<scalar_t>(n, width, stride, vec, gp, upp, op);
        const auto stream = at::cuda::getCurrentCUDAStream();
        with_activation(act, [&](auto a) {
          using Act = decltype(a);
          if (vec)
            gated_forward_kernel<scalar_t, Act, true>
                <<<blocks_for(layout.n), kThreads, 0, stream>>>(gp, upp, op, layout);
          else
            gated_forward_kernel<scalar_t, Act, false>
                <<<blocks_for(layout.n), kThreads, 0, stream>>>(gp, upp, op, layout);
        });
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// d_gate, d_up (laid out as gate and up) and, when `out` is defined, the recomputed output.
void gated_backward_into(const at::Tensor& grad, const void* gate, const void* up, void* d_gate,
                         void* d_up, at::Tensor* out, int64_t width, int64_t stride, int64_t act) {
  const int64_t n = grad.numel();
  if (n == 0) return;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, grad.scalar_type(), "gated_backward", [&] {
        const auto* dyp = grad.data_ptr<scalar_t>();
        const auto *gp = static_cast<const scalar_t*>(gate),
                   *upp = static_cast<const scalar_t*>(up);
        auto *dgp = static_cast<scalar_t*>(d_gate), *dup = static_cast<scalar_t*>(d_up);
        scalar_t* op = out ? out->data_ptr<scalar_t>() : dgp;  // unused without an output
        bool vec = false;
        const Layout layout =
            layout_for<scalar_t>(n, width, stride, vec, dyp, gp, upp, dgp, dup, op);
        const auto stream = at::cuda::getCurrentCUDAStream();
        const int blocks = blocks_for(layout.n);
        with_activation(act, [&](auto a) {
          using Act = decltype(a);
          if (vec && out)
            gated_backward_kernel<scalar_t, Act, true, true>
                <<<blocks, kThreads, 0, stream>>>(dyp, gp, upp, dgp, dup, op, layout);
          else if (vec)
            gated_backward_kernel<scalar_t, Act, true, false>
                <<<blocks, kThreads, 0, stream>>>(dyp, gp, upp, dgp, dup, op, layout);
          else if (out)
            gated_backward_kernel<scalar_t, Act, false, true>
                <<<blocks, kThreads, 0, stream>>>(dyp, gp, upp, dgp, dup, op, layout);
          else
            gated_backward_kernel<scalar_t, Act, false, false>
                <<<blocks, kThreads, 0, stream>>>(dyp, gp, upp, dgp, dup, op, layout);
        });
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor gated_forward_cuda(const at::Tensor& gate, const at::Tensor& up, int64_t act) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto g = gate.contiguous(), u = up.contiguous();
  auto out = at::empty_like(g);
  const int64_t width = g.dim() ? g.size(-1) : 1;
  gated_forward_into(g, g.data_ptr(), u.data_ptr(), out, width, width, act);
  return out;
}

std::tuple<at::Tensor, at::Tensor> gated_backward_cuda(const at::Tensor& grad,
                                                       const at::Tensor& gate, const at::Tensor& up,
                                                       int64_t act) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto dy = grad.contiguous(), g = gate.contiguous(), u = up.contiguous();
  auto d_gate = at::empty_like(g), d_up = at::empty_like(u);
  const int64_t width = g.dim() ? g.size(-1) : 1;
  gated_backward_into(dy, g.data_ptr(), u.data_ptr(), d_gate.data_ptr(), d_up.data_ptr(), nullptr,
                      width, width, act);
  return {d_gate, d_up};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> gated_backward_with_output_cuda(
    const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up, int64_t act) {
  c10::cuda::CUDAGuard guard(gate.device());
  auto dy = grad.contiguous(), g = gate.contiguous(), u = up.contiguous();
  auto d_gate = at::empty_like(g), d_up = at::empty_like(u), out = at::empty_like(g);
  const int64_t width = g.dim() ? g.size(-1) : 1;
  gated_backward_into(dy, g.data_ptr(), u.data_ptr(), d_gate.data_ptr(), d_up.data_ptr(), &out,
                      width, width, act);
  return {d_gate, d_up, out};
}

// gate_up [.., 2 * width]: gate and up read in place.
at::Tensor gated_packed_forward_cuda(const at::Tensor& gate_up, int64_t act) {
  c10::cuda::CUDAGuard guard(gate_up.device());
  auto gu = gate_up.contiguous();
  const int64_t width = gu.size(-1) / 2;
  auto sizes = gu.sizes().vec();
  sizes.back() = width;
  auto out = at::empty(sizes, gu.options());
  const auto* base = static_cast<const char*>(gu.data_ptr());
  gated_forward_into(gu, base, base + width * gu.element_size(), out, width, 2 * width, act);
  return out;
}

// The gradient of gate_up, both halves written in place.
at::Tensor gated_packed_backward_cuda(const at::Tensor& grad, const at::Tensor& gate_up,
                                      int64_t act) {
  c10::cuda::CUDAGuard guard(gate_up.device());
  auto dy = grad.contiguous(), gu = gate_up.contiguous();
  const int64_t width = gu.size(-1) / 2;
  auto d_gu = at::empty_like(gu);
  const auto* base = static_cast<const char*>(gu.data_ptr());
  auto* d_base = static_cast<char*>(d_gu.data_ptr());
  const int64_t half = width * gu.element_size();
  gated_backward_into(dy, base, base + half, d_base, d_base + half, nullptr, width, 2 * width, act);
  return d_gu;
}

// As gated_packed_backward_cuda, and the output act(gate) * up recomputed beside.
std::tuple<at::Tensor, at::Tensor> gated_packed_backward_with_output_cuda(const at::Tensor& grad,
                                                                          const at::Tensor& gate_up,
                                                                          int64_t act) {
  c10::cuda::CUDAGuard guard(gate_up.device());
  auto dy = grad.contiguous(), gu = gate_up.contiguous();
  const int64_t width = gu.size(-1) / 2;
  auto d_gu = at::empty_like(gu), out = at::empty_like(dy);
  const auto* base = static_cast<const char*>(gu.data_ptr());
  auto* d_base = static_cast<char*>(d_gu.data_ptr());
  const int64_t half = width * gu.element_size();
  gated_backward_into(dy, base, base + half, d_base, d_base + half, &out, width, 2 * width, act);
  return {d_gu, out};
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("gated_forward", gated_forward_cuda);
  m.impl("gated_backward", gated_backward_cuda);
  m.impl("gated_backward_with_output", gated_backward_with_output_cuda);
  m.impl("gated_packed_forward", gated_packed_forward_cuda);
  m.impl("gated_packed_backward", gated_packed_backward_cuda);
  m.impl("gated_packed_backward_with_output", gated_packed_backward_with_output_cuda);
}

}  // namespace kubetune::kernels
