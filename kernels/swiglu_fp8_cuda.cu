// CUDA implementation of kubetune::swiglu_forward_fp8 / swiglu_backward_fp8 (kernels/swiglu_fp8.h):
// one block per row, two passes. The first computes the row's SwiGLU values (or gradients), stores
// them in the storage dtype and finds the row's largest magnitude; the second writes the row in
// FP8 from registers (rows up to 16,384 wide in bf16 or fp16, 8,192 in fp32) or from what the first
// pass stored. Rows whose width
// or tensors do not allow 16-byte accesses take the separate ops instead.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <initializer_list>

#include "kernels/fp8_rows.cuh"
#include "kernels/swiglu.h"
#include "kernels/swiglu_fp8.h"
#include "kernels/swiglu_math.cuh"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

// Threads per row and the packs each keeps in registers: rows up to threads * packs * 8 values
// (16,384 bf16; Llama-3.1-8B's intermediate width is 14,336) are read once. Backward keeps two
// packs (d_gate's and d_up's) per column pack, so it runs twice the threads to keep as many.
// More threads with fewer packs each measured faster on an H100 at the 8B shape (4096 rows of
// 14,336): forward 163 us with 512 x 4 against 193 with 256 x 8, backward 334 us with 1024 x 2
// against 385 with 512 x 4 (bench/fp8_rows_probe.py; bench/README.md, session 21).
constexpr int kForwardThreads = 512, kForwardPacks = 4;
constexpr int kBackwardThreads = 1024, kBackwardPacks = 2;

template <typename T, bool kCached>
__global__ void __launch_bounds__(kForwardThreads)
    swiglu_forward_fp8_kernel(const T* __restrict__ gate, const T* __restrict__ up,
                              T* __restrict__ out, __nv_fp8_storage_t* __restrict__ values,
                              float* __restrict__ scales, int64_t cols, int64_t stride) {
  constexpr int W = Vec<T>::kWidth;
  using Pack = typename Vec<T>::Pack;
  using Row = RowPack<T, W>;
  const int64_t row = blockIdx.x, packs = cols / W, first = row * cols, in = row * stride;
  // Pack i of the output row: computed, stored and returned.
  auto output = [&](int64_t i) {
    const Pack g = Vec<T>::load(gate + in + i * W), u = Vec<T>::load(up + in + i * W);
    Pack o;
#pragma unroll
    for (int j = 0; j < W; ++j)
      o.v[j] = static_cast<T>(silu_times(static_cast<float>(g.v[j]), static_cast<float>(u.v[j])));
    Vec<T>::store(out + first + i * W, o);
    return o;
  };
  float amax = 0.f;
  Pack cache[kCached ? kForwardPacks : 1];
  if constexpr (kCached) {
#pragma unroll
    for (int c = 0; c < kForwardPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kForwardThreads;
      if (i < packs) {
        cache[c] = output(i);
        amax = fmaxf(amax, Row(cache[c], nullptr, i).amax());
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < packs; i += kForwardThreads)
      amax = fmaxf(amax, Row(output(i), nullptr, i).amax());
  }
  const RowScale scale(block_max<kForwardThreads>(amax));
  __nv_fp8_storage_t* q = values + first;
  if constexpr (kCached) {
#pragma unroll
    for (int c = 0; c < kForwardPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kForwardThreads;
      if (i < packs) Row(cache[c], nullptr, i).store(q, i, scale.inverse());
    }
  } else {
    for (int64_t i = threadIdx.x; i < packs; i += kForwardThreads)
      Row(Vec<T>::load(out + first + i * W), nullptr, i).store(q, i, scale.inverse());
  }
  if (threadIdx.x == 0) scales[row] = scale.scale();
}

// d_gate's and d_up's pack i of a row.
template <typename T>
struct GradientPacks {
  typename Vec<T>::Pack gate, up;
};

// column_scale: [2 cols] or null; the quantized row is [d_gate d_up], 2 cols wide. gate, up, d_gate
// and d_up rows are `stride` apart (see StridedInputs), grad's and out's `cols`.
template <typename T, bool kCached>
__global__ void __launch_bounds__(kBackwardThreads)
    swiglu_backward_fp8_kernel(const T* __restrict__ grad, const T* __restrict__ gate,
                               const T* __restrict__ up, T* __restrict__ d_gate,
                               T* __restrict__ d_up, T* __restrict__ out,
                               const float* __restrict__ column_scale,
                               __nv_fp8_storage_t* __restrict__ values, float* __restrict__ scales,
                               int64_t cols, int64_t stride) {
  constexpr int W = Vec<T>::kWidth;
  using Pack = typename Vec<T>::Pack;
  using Row = RowPack<T, W>;
  const int64_t row = blockIdx.x, packs = cols / W, first = row * cols, in = row * stride;
  const float* up_scale = column_scale ? column_scale + cols : nullptr;
  // Pack i's gradients (and the recomputed output): computed, stored and returned.
  auto gradients = [&](int64_t i) {
    const int64_t at = first + i * W, in_at = in + i * W;
    const Pack dy = Vec<T>::load(grad + at), g = Vec<T>::load(gate + in_at),
               u = Vec<T>::load(up + in_at);
    GradientPacks<T> d;
    Pack y;
#pragma unroll
    for (int j = 0; j < W; ++j) {
      const float gf = static_cast<float>(g.v[j]), uf = static_cast<float>(u.v[j]);
      float dg, du;
      swiglu_grads(static_cast<float>(dy.v[j]), gf, uf, dg, du);
      d.gate.v[j] = static_cast<T>(dg);
      d.up.v[j] = static_cast<T>(du);
      y.v[j] = static_cast<T>(silu_times(gf, uf));
    }
    Vec<T>::store(d_gate + in_at, d.gate);
    Vec<T>::store(d_up + in_at, d.up);
    Vec<T>::store(out + at, y);
    return d;
  };
  auto amax_of = [&](const GradientPacks<T>& d, int64_t i) {
    return fmaxf(Row(d.gate, column_scale, i).amax(), Row(d.up, up_scale, i).amax());
  };
  float amax = 0.f;
  GradientPacks<T> cache[kCached ? kBackwardPacks : 1];
  if constexpr (kCached) {
#pragma unroll
    for (int c = 0; c < kBackwardPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kBackwardThreads;
      if (i < packs) {
        cache[c] = gradients(i);
        amax = fmaxf(amax, amax_of(cache[c], i));
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < packs; i += kBackwardThreads)
      amax = fmaxf(amax, amax_of(gradients(i), i));
  }
  const RowScale scale(block_max<kBackwardThreads>(amax));
  __nv_fp8_storage_t* q = values + 2 * first;
  auto store = [&](const GradientPacks<T>& d, int64_t i) {
    Row(d.gate, column_scale, i).store(q, i, scale.inverse());
    Row(d.up, up_scale, i).store(q + cols, i, scale.inverse());
  };
  if constexpr (kCached) {
#pragma unroll
    for (int c = 0; c < kBackwardPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kBackwardThreads;
      if (i < packs) store(cache[c], i);
    }
  } else {
    for (int64_t i = threadIdx.x; i < packs; i += kBackwardThreads)
      store({Vec<T>::load(d_gate + in + i * W), Vec<T>::load(d_up + in + i * W)}, i);
  }
  if (threadIdx.x == 0) scales[row] = scale.scale();
}

// Whether rows `cols` wide of every tensor start 16-byte aligned, as the kernels read them.
bool rows_take_packs(int64_t cols, std::initializer_list<const at::Tensor*> tensors) {
  for (const auto* t : tensors)
    if (t->defined() && ((cols * t->element_size()) % 16 != 0 ||
                         reinterpret_cast<std::uintptr_t>(t->data_ptr()) % 16 != 0))
      return false;
  return true;
}

// gate and up as the kernels read them: the two halves of one packed [rows, 2 cols] tensor (a
// fused gate_up_proj) in place, rows `stride` = 2 cols apart, or each made contiguous.
struct StridedInputs {
  at::Tensor gate, up;
  int64_t stride;
  bool packed() const { return stride != gate.size(1); }
};
StridedInputs strided_inputs(const at::Tensor& gate, const at::Tensor& up) {
  const int64_t cols = gate.size(1);
  if (cols > 0 && are_packed_halves(gate, up)) return {gate, up, 2 * cols};
  return {gate.contiguous(), up.contiguous(), cols};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> forward_cuda(const at::Tensor& gate,
                                                            const at::Tensor& up) {
  c10::cuda::CUDAGuard guard(gate.device());
  const StridedInputs in = strided_inputs(gate, up);
  const auto &g = in.gate, &u = in.up;
  const int64_t rows = g.size(0), cols = g.size(1);
  if (rows == 0 || cols == 0 || !rows_take_packs(cols, {&g, &u})) {
    const auto out = swiglu_forward_op(g, u);
    const Fp8Rows q = quantize_rows_fp8(out);
    return {out, q.values, q.scales};
  }
  auto out = at::empty({rows, cols}, g.options());
  auto values = at::empty({rows, cols}, g.options().dtype(at::kFloat8_e4m3fn));
  auto scales = at::empty({rows, 1}, g.options().dtype(at::kFloat));
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, g.scalar_type(), "swiglu_forward_fp8", [&] {
        const bool cached =
            cols <= int64_t(kForwardThreads) * kForwardPacks * Vec<scalar_t>::kWidth;
        auto kernel = cached ? swiglu_forward_fp8_kernel<scalar_t, true>
                             : swiglu_forward_fp8_kernel<scalar_t, false>;
        kernel<<<rows, kForwardThreads, 0, stream>>>(
            g.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
            static_cast<__nv_fp8_storage_t*>(values.data_ptr()), scales.data_ptr<float>(), cols,
            in.stride);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, values, scales};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward_cuda(
    const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up,
    const c10::optional<at::Tensor>& column_scale) {
  c10::cuda::CUDAGuard guard(gate.device());
  const auto dy = grad.contiguous();
  const StridedInputs in = strided_inputs(gate, up);
  const auto &g = in.gate, &u = in.up;
  at::Tensor cs;
  if (column_scale) cs = column_scale->to(g.device(), at::kFloat).contiguous();
  const int64_t rows = g.size(0), cols = g.size(1);
  // The column scales are read 16 bytes at a time, d_up's from column `cols` on.
  const bool scales_take_packs =
      !cs.defined() || (reinterpret_cast<std::uintptr_t>(cs.data_ptr()) % 16 == 0 && cols % 4 == 0);
  if (rows == 0 || cols == 0 || !scales_take_packs || !rows_take_packs(cols, {&dy, &g, &u})) {
    auto [d_gate, d_up, out] = swiglu_backward_with_output(dy, g, u);
    const Fp8Rows q = quantize_rows_fp8({d_gate, d_up}, cs);
    return {d_gate, d_up, out, q.values, q.scales};
  }
  // The gradients laid out as the inputs: packed side by side when they are.
  at::Tensor d_gate, d_up, out = at::empty({rows, cols}, g.options());
  if (in.packed()) {
    const auto d = at::empty({rows, 2 * cols}, g.options());
    d_gate = d.narrow(1, 0, cols), d_up = d.narrow(1, cols, cols);
  } else {
    d_gate = at::empty_like(g), d_up = at::empty_like(g);
  }
  auto values = at::empty({rows, 2 * cols}, g.options().dtype(at::kFloat8_e4m3fn));
  auto scales = at::empty({rows, 1}, g.options().dtype(at::kFloat));
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, g.scalar_type(), "swiglu_backward_fp8", [&] {
        const bool cached =
            cols <= int64_t(kBackwardThreads) * kBackwardPacks * Vec<scalar_t>::kWidth;
        auto kernel = cached ? swiglu_backward_fp8_kernel<scalar_t, true>
                             : swiglu_backward_fp8_kernel<scalar_t, false>;
        kernel<<<rows, kBackwardThreads, 0, stream>>>(
            dy.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), u.data_ptr<scalar_t>(),
            d_gate.data_ptr<scalar_t>(), d_up.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
            cs.defined() ? cs.data_ptr<float>() : nullptr,
            static_cast<__nv_fp8_storage_t*>(values.data_ptr()), scales.data_ptr<float>(), cols,
            in.stride);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {d_gate, d_up, out, values, scales};
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("swiglu_forward_fp8", forward_cuda);
  m.impl("swiglu_backward_fp8", backward_cuda);
}

}  // namespace kubetune::kernels
