// CUDA implementation of kubetune::rms_norm_rope_{forward,backward}: one warp per head row, each
// lane holding V = head_dim / 32 consecutive values. RoPE pairs value i with value i + head_dim/2,
// which lives in lane ^ 16, so the rotation takes one shuffle per value. Arithmetic in fp32;
// rms_norm_rope.cpp holds the formulas.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/rms_norm_rope.h"

namespace kubetune::kernels {
namespace {

constexpr int kWarps = 8;  // warps per block
constexpr unsigned kAll = 0xffffffffu;

// V consecutive values of a lane, loaded and stored as one access (two for 32 bytes).
template <typename T, int V>
struct alignas(sizeof(T) * V > 16 ? 16 : sizeof(T) * V) Lane {
  T v[V];
};

template <typename T, int V>
__device__ void load(const T* p, float (&out)[V]) {
  const auto lane = *reinterpret_cast<const Lane<T, V>*>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = static_cast<float>(lane.v[j]);
}

template <typename T, int V>
__device__ void store(T* p, const float (&in)[V]) {
  Lane<T, V> lane;
#pragma unroll
  for (int j = 0; j < V; ++j) lane.v[j] = static_cast<T>(in[j]);
  *reinterpret_cast<Lane<T, V>*>(p) = lane;
}

__device__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kAll, v, offset);
  return v;
}

// Rounds to T and back: where the unfused path writes a T tensor between its two ops.
template <typename T>
__device__ float round_to(float v) {
  return static_cast<float>(static_cast<T>(v));
}

template <int V>
__device__ float inverse_rms(const float (&x)[V], float eps) {
  float squares = 0.f;
#pragma unroll
  for (int j = 0; j < V; ++j) squares += x[j] * x[j];
  return rsqrtf(warp_sum(squares) / (32 * V) + eps);
}

struct Rows {
  int64_t count;     // head rows: batch * tokens * heads
  int64_t heads;     // per token
  int64_t x_stride;  // elements between tokens in x
};

// out = rope(rms_norm(x) * weight): the lanes below 16 hold the first half of the head (out1 =
// n1 c - n2 s), the others the second (out2 = n2 c + n1 s); cos and sin are read at the lane's own
// positions.
template <typename T, typename C, int V>
__global__ void rms_norm_rope_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                             const C* __restrict__ cos, const C* __restrict__ sin,
                                             T* __restrict__ out, Rows rows, float eps) {
  constexpr int D = 32 * V;
  const int lane = threadIdx.x % 32, first = lane * V;
  const float sign = lane < 16 ? -1.f : 1.f;
  float w[V];
  load<T, V>(weight + first, w);
  for (int64_t r = blockIdx.x * int64_t(kWarps) + threadIdx.x / 32; r < rows.count;
       r += int64_t(gridDim.x) * kWarps) {
    const int64_t token = r / rows.heads, head = r % rows.heads;
    float v[V], c[V], s[V], o[V];
    load<T, V>(x + token * rows.x_stride + head * D + first, v);
    load<C, V>(cos + token * D + first, c);
    load<C, V>(sin + token * D + first, s);
    const float rstd = inverse_rms(v, eps);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = round_to<T>(v[j] * rstd * w[j]);
#pragma unroll
    for (int j = 0; j < V; ++j) o[j] = v[j] * c[j] + sign * __shfl_xor_sync(kAll, v[j], 16) * s[j];
    store<T, V>(out + r * D + first, o);
  }
}

// The rotation backward (by the opposite angle: d_normed = dy c + dy' s' below 16, dy c - dy' s'
// above, primes being the partner lane's), then RMSNorm's backward; with a weight gradient, each
// lane sums d_normed * x_hat over its rows, and the block adds its sums to dweight (fp32).
template <typename T, typename C, int V>
__global__ void rms_norm_rope_backward_kernel(const T* __restrict__ grad, const T* __restrict__ x,
                                              const T* __restrict__ weight,
                                              const C* __restrict__ cos, const C* __restrict__ sin,
                                              T* __restrict__ dx, float* __restrict__ dweight,
                                              Rows rows, float eps) {
  constexpr int D = 32 * V;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, first = lane * V;
  const float sign = lane < 16 ? 1.f : -1.f;
  float w[V], dw[V] = {};
  load<T, V>(weight + first, w);
  for (int64_t r = blockIdx.x * int64_t(kWarps) + warp; r < rows.count;
       r += int64_t(gridDim.x) * kWarps) {
    const int64_t token = r / rows.heads, head = r % rows.heads;
    float dy[V], v[V], c[V], s[V], g[V];
    load<T, V>(grad + r * D + first, dy);
    load<T, V>(x + token * rows.x_stride + head * D + first, v);
    load<C, V>(cos + token * D + first, c);
    load<C, V>(sin + token * D + first, s);
    const float rstd = inverse_rms(v, eps);
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float partner = __shfl_xor_sync(kAll, dy[j] * s[j], 16);
      const float d_normed = round_to<T>(dy[j] * c[j] + sign * partner);
      v[j] *= rstd;  // x_hat
      g[j] = d_normed * w[j];
      dot += g[j] * v[j];
      dw[j] += d_normed * v[j];
    }
    const float mean = warp_sum(dot) / D;
#pragma unroll
    for (int j = 0; j < V; ++j) g[j] = rstd * (g[j] - v[j] * mean);
    store<T, V>(dx + r * D + first, g);
  }
  if (dweight == nullptr) return;
  __shared__ float partial[kWarps][D];
#pragma unroll
  for (int j = 0; j < V; ++j) partial[warp][first + j] = dw[j];
  __syncthreads();
  for (int i = threadIdx.x; i < D; i += blockDim.x) {
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) total += partial[k][i];
    atomicAdd(dweight + i, total);
  }
}

int blocks_for_rows(int64_t rows) {
  const int64_t wanted = (rows + kWarps - 1) / kWarps;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 16;
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, cap)));
}

// The widest access a lane makes into a tensor of `t`'s dtype: V = head_dim / 32 values, at most
// 16 bytes at a time.
int64_t access_bytes(const at::Tensor& t, int64_t head_dim) {
  return std::min<int64_t>(16, head_dim / 32 * t.element_size());
}

bool aligned(const void* p, int64_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// t itself when contiguous and aligned for the lanes' accesses, else an aligned contiguous copy (a
// fresh allocation: contiguous() returns a contiguous tensor as it is, aligned or not).
at::Tensor lanes_readable(const at::Tensor& t, int64_t head_dim) {
  const bool ok = t.is_contiguous() && aligned(t.data_ptr(), access_bytes(t, head_dim));
  return ok ? t : t.clone(at::MemoryFormat::Contiguous);
}

// x [B,T,H,D] read in place where each head's values are contiguous and tokens x.stride(1) apart
// (a view of a wider product's columns), aligned for the lanes' accesses; else a copy.
at::Tensor heads_readable(const at::Tensor& x) {
  const int64_t D = x.size(3), bytes = access_bytes(x, D);
  const bool layout = x.stride(3) == 1 && x.stride(2) == D &&
                      (x.size(0) == 1 || x.stride(0) == x.size(1) * x.stride(1));
  const bool ok =
      layout && aligned(x.data_ptr(), bytes) && (x.stride(1) * x.element_size()) % bytes == 0;
  return ok ? x : x.clone(at::MemoryFormat::Contiguous);
}

Rows rows_of(const at::Tensor& x) {
  return {x.size(0) * x.size(1) * x.size(2), x.size(2), x.stride(1)};
}

void check(const at::Tensor& x, const at::Tensor& weight) {
  TORCH_CHECK(rms_norm_rope_fits(x.size(3)),
              "rms_norm_rope (CUDA): head_dim must be 64, 128 or 256, got ", x.size(3));
  TORCH_CHECK(weight.scalar_type() == x.scalar_type(),
              "rms_norm_rope (CUDA): weight and x dtypes differ");
}

// Calls f(T{}, C{}, width) for x's dtype T, cos and sin's (T or fp32) C, and V = head_dim / 32 as
// a std::integral_constant.
template <typename F>
void dispatch(const at::Tensor& x, const at::Tensor& cos, F&& f) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rms_norm_rope", [&] {
    const bool same = cos.scalar_type() == x.scalar_type();
    TORCH_CHECK(same || cos.scalar_type() == at::kFloat,
                "rms_norm_rope (CUDA): cos and sin must be fp32 or x's dtype");
    auto by_width = [&](auto c_tag) {
      using C = decltype(c_tag);
      switch (x.size(3)) {
        case 64:
          f(scalar_t{}, C{}, std::integral_constant<int, 2>{});
          break;
        case 128:
          f(scalar_t{}, C{}, std::integral_constant<int, 4>{});
          break;
        default:
          f(scalar_t{}, C{}, std::integral_constant<int, 8>{});
          break;
      }
    };
    if (same)
      by_width(scalar_t{});
    else
      by_width(float{});
  });
}

at::Tensor forward_cuda(const at::Tensor& x_in, const at::Tensor& weight_in,
                        const at::Tensor& cos_in, const at::Tensor& sin_in, double eps) {
  c10::cuda::CUDAGuard guard(x_in.device());
  check(x_in, weight_in);
  const auto x = heads_readable(x_in);
  const int64_t D = x.size(3);
  const auto weight = lanes_readable(weight_in, D), cos = lanes_readable(cos_in, D),
             sin = lanes_readable(sin_in, D);
  auto out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const Rows rows = rows_of(x);
  if (rows.count == 0) return out;
  const auto stream = at::cuda::getCurrentCUDAStream();
  dispatch(x, cos, [&](auto t, auto c, auto width) {
    using T = decltype(t);
    using C = decltype(c);
    rms_norm_rope_forward_kernel<T, C, decltype(width)::value>
        <<<blocks_for_rows(rows.count), 32 * kWarps, 0, stream>>>(
            x.data_ptr<T>(), weight.data_ptr<T>(), cos.data_ptr<C>(), sin.data_ptr<C>(),
            out.data_ptr<T>(), rows, static_cast<float>(eps));
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad_in, const at::Tensor& x_in,
                                                 const at::Tensor& weight_in,
                                                 const at::Tensor& cos_in, const at::Tensor& sin_in,
                                                 double eps, bool weight_grad) {
  c10::cuda::CUDAGuard guard(x_in.device());
  check(x_in, weight_in);
  const auto x = heads_readable(x_in);
  const int64_t D = x.size(3);
  const auto grad = lanes_readable(grad_in.to(x.scalar_type()), D);
  const auto weight = lanes_readable(weight_in, D), cos = lanes_readable(cos_in, D),
             sin = lanes_readable(sin_in, D);
  auto dx = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  auto dweight = weight_grad ? at::zeros({x.size(3)}, x.options().dtype(at::kFloat))
                             : at::empty({0}, weight.options());
  const Rows rows = rows_of(x);
  if (rows.count > 0) {
    const auto stream = at::cuda::getCurrentCUDAStream();
    dispatch(x, cos, [&](auto t, auto c, auto width) {
      using T = decltype(t);
      using C = decltype(c);
      rms_norm_rope_backward_kernel<T, C, decltype(width)::value>
          <<<blocks_for_rows(rows.count), 32 * kWarps, 0, stream>>>(
              grad.data_ptr<T>(), x.data_ptr<T>(), weight.data_ptr<T>(), cos.data_ptr<C>(),
              sin.data_ptr<C>(), dx.data_ptr<T>(),
              weight_grad ? dweight.data_ptr<float>() : nullptr, rows, static_cast<float>(eps));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  return {dx, weight_grad ? dweight.to(weight.scalar_type()) : dweight};
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("rms_norm_rope_forward", forward_cuda);
  m.impl("rms_norm_rope_backward", backward_cuda);
}

}  // namespace kubetune::kernels
