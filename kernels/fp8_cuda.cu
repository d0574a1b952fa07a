// CUDA implementation of kubetune::fp8_quantize_rows: a block of threads per row, two passes over
// it (the row's largest magnitude, then the scaled and rounded values; the second from registers
// where the row fits them), 16-byte loads and W-byte stores where the row allows, float32
// arithmetic (no fast math) so the result is the CPU reference's to the bit.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp8.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "kernels/fp8.h"
#include "kernels/fp8_rows.cuh"
#include "kernels/transpose_tile.cuh"
#include "kernels/vectorized.cuh"

namespace kubetune::kernels {
namespace {

constexpr int kRowThreads = 256;

// The matrix being quantized: up to kMaxParts matrices of the same rows side by side, so that
// the gradients of several outputs of one input (q, k and v) are quantized as one, each read where
// it is. Every part's width is a multiple of W.
constexpr int kMaxParts = 4;
template <typename T>
struct RowParts {
  const T* data[kMaxParts];
  int64_t end[kMaxParts];  // the column after each part
  int count;
  // Pack i (columns [i W, i W + W)) of `row`, found in its part.
  template <int W>
  __device__ typename RowPack<T, W>::Raw load(int64_t row, int64_t i) const {
    const int64_t col = i * W;
    int p = 0;
    while (p + 1 < count && col >= end[p]) ++p;
    const int64_t start = p == 0 ? 0 : end[p - 1];
    return RowPack<T, W>::load(data[p] + row * (end[p] - start) + (col - start), 0);
  }
};

// Rows up to kRowThreads * kMaxCachedPacks * W values (16,384 bf16, Llama-3.1-8B's widest is
// 14,336) are read from memory once: each thread keeps its packs of the row in registers between
// the two passes. The grid is persistent (kBlocksPerSm blocks per SM, each taking rows
// gridDim.x apart), and a thread loads its packs of the block's next row before reducing this
// one: a block per row, as before, kept the memory busy only while its row's loads were in
// flight and reached a third of the bandwidth (bench/README.md, session 21).
constexpr int kMaxCachedPacks = 8;
constexpr int kBlocksPerSm = 4;

template <typename T, int W, int kPacks>
__global__ void __launch_bounds__(kRowThreads)
    quantize_rows_kernel(RowParts<T> x, const float* __restrict__ column_scale,
                         __nv_fp8_storage_t* __restrict__ values, float* __restrict__ scales,
                         int64_t rows, int64_t cols) {
  using Pack = RowPack<T, W>;
  using Raw = typename Pack::Raw;
  const int64_t packs = cols / W;
  auto load = [&](Raw(&row_packs)[kPacks], int64_t row) {
#pragma unroll
    for (int c = 0; c < kPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kRowThreads;
      if (row < rows && i < packs) row_packs[c] = x.template load<W>(row, i);
    }
  };
  Raw current[kPacks], next[kPacks];
  int64_t row = blockIdx.x;
  load(current, row);
  for (int parity = 0; row < rows; row += gridDim.x, parity ^= 1) {
    load(next, row + gridDim.x);
    float amax = 0.f;
#pragma unroll
    for (int c = 0; c < kPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kRowThreads;
      if (i < packs) amax = fmaxf(amax, Pack(current[c], column_scale, i).amax());
    }
    const RowScale scale(block_max<kRowThreads>(amax, parity));
    __nv_fp8_storage_t* out = values + row * cols;
#pragma unroll
    for (int c = 0; c < kPacks; ++c) {
      const int64_t i = threadIdx.x + int64_t(c) * kRowThreads;
      if (i < packs) Pack(current[c], column_scale, i).store(out, i, scale.inverse());
    }
    if (threadIdx.x == 0) scales[row] = scale.scale();
#pragma unroll
    for (int c = 0; c < kPacks; ++c) current[c] = next[c];
  }
}

// Wider rows (and rows without 16-byte loads, W = 1): a block per row, read twice.
template <typename T, int W>
__global__ void __launch_bounds__(kRowThreads)
    quantize_wide_rows_kernel(RowParts<T> x, const float* __restrict__ column_scale,
                              __nv_fp8_storage_t* __restrict__ values, float* __restrict__ scales,
                              int64_t cols) {
  using Pack = RowPack<T, W>;
  const int64_t row = blockIdx.x, packs = cols / W;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < packs; i += kRowThreads)
    amax = fmaxf(amax, Pack(x.template load<W>(row, i), column_scale, i).amax());
  const RowScale scale(block_max<kRowThreads>(amax));
  __nv_fp8_storage_t* out = values + row * cols;
  for (int64_t i = threadIdx.x; i < packs; i += kRowThreads)
    Pack(x.template load<W>(row, i), column_scale, i).store(out, i, scale.inverse());
  if (threadIdx.x == 0) scales[row] = scale.scale();
}

// Launches the kernel that keeps a row's packs in registers, with packs per thread enough for
// `cols` (1 to 4, else 8: registers a thread does not need are occupancy lost); false where none
// holds them. With 8 packs (the current row's and the next's) fewer than kBlocksPerSm blocks fit on
// a multiprocessor; the others start as those finish: the same rows per multiprocessor, in rounds.
template <typename T, int W>
bool launch_cached(const RowParts<T>& x, const float* column_scale, __nv_fp8_storage_t* values,
                   float* scales, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t packs_per_thread = (cols / W + kRowThreads - 1) / kRowThreads;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(rows, sms * kBlocksPerSm));
  auto launch = [&](auto kernel) {
    kernel<<<grid, kRowThreads, 0, stream>>>(x, column_scale, values, scales, rows, cols);
    return true;
  };
  switch (packs_per_thread) {
    case 1:
      return launch(quantize_rows_kernel<T, W, 1>);
    case 2:
      return launch(quantize_rows_kernel<T, W, 2>);
    case 3:
      return launch(quantize_rows_kernel<T, W, 3>);
    case 4:
      return launch(quantize_rows_kernel<T, W, 4>);
    default:
      return packs_per_thread <= kMaxCachedPacks &&
             launch(quantize_rows_kernel<T, W, kMaxCachedPacks>);
  }
}

std::tuple<at::Tensor, at::Tensor> quantize_rows_cuda(
    at::TensorList parts, const c10::optional<at::Tensor>& column_scale) {
  TORCH_CHECK(!parts.empty() && parts.size() <= kMaxParts, "fp8_quantize_rows: 1 to ", kMaxParts,
              " parts, got ", parts.size());
  c10::cuda::CUDAGuard guard(parts[0].device());
  std::vector<at::Tensor> in;
  int64_t cols = 0;
  for (const auto& part : parts) {
    TORCH_CHECK(part.dim() == 2 && part.size(0) == parts[0].size(0) &&
                    part.scalar_type() == parts[0].scalar_type(),
                "fp8_quantize_rows: parts must be 2-D of the same rows and dtype, got ",
                part.sizes());
    in.push_back(part.contiguous());
    cols += part.size(1);
  }
  for (const auto& part : parts)
    TORCH_CHECK(part.device() == parts[0].device(), "fp8_quantize_rows: parts on ", part.device(),
                " and ", parts[0].device());
  at::Tensor cs;
  if (column_scale) cs = column_scale->to(parts[0].device(), at::kFloat).contiguous();
  const int64_t rows = in[0].size(0);
  auto values = at::empty({rows, cols}, in[0].options().dtype(at::kFloat8_e4m3fn));
  auto scales = at::empty({rows, 1}, in[0].options().dtype(at::kFloat));
  if (rows == 0 || cols == 0) return {values, scales};
  const float* csp = cs.defined() ? cs.data_ptr<float>() : nullptr;
  auto* vp = reinterpret_cast<__nv_fp8_storage_t*>(values.data_ptr());
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, in[0].scalar_type(), "fp8_quantize_rows", [&] {
        RowParts<scalar_t> x{};
        x.count = static_cast<int>(in.size());
        // Every row of every part starts 16-byte aligned when its width is a multiple of the
        // pack and the tensors themselves are aligned.
        bool vectorized = reinterpret_cast<std::uintptr_t>(csp) % 16 == 0;
        for (size_t p = 0; p < in.size(); ++p) {
          x.data[p] = in[p].data_ptr<scalar_t>();
          x.end[p] = (p == 0 ? 0 : x.end[p - 1]) + in[p].size(1);
          vectorized = vectorized && Vec<scalar_t>::usable(in[p].size(1), x.data[p]);
        }
        constexpr int kW = Vec<scalar_t>::kWidth;
        float* sp = scales.data_ptr<float>();
        if (!vectorized)
          quantize_wide_rows_kernel<scalar_t, 1>
              <<<rows, kRowThreads, 0, stream>>>(x, csp, vp, sp, cols);
        else if (!launch_cached<scalar_t, kW>(x, csp, vp, sp, rows, cols, stream))
          quantize_wide_rows_kernel<scalar_t, kW>
              <<<rows, kRowThreads, 0, stream>>>(x, csp, vp, sp, cols);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {values, scales};
}

__global__ void transpose_bytes_kernel(const uint8_t* __restrict__ in, uint8_t* __restrict__ out,
                                       int64_t ld, int64_t rows, int64_t cols) {
  __shared__ tile::Tile t;
  const int64_t r0 = int64_t(blockIdx.y) * tile::kTile, c0 = int64_t(blockIdx.x) * tile::kTile;
  for (int i = tile::first_row(); i < tile::kTile; i += tile::kRowsPerPass) {
    const int64_t r = r0 + i, c = c0 + tile::word() * 4;
    if (r < rows && c < cols)
      *reinterpret_cast<uint32_t*>(&t.bytes[i][tile::word() * 4]) =
          *reinterpret_cast<const uint32_t*>(in + r * cols + c);
  }
  __syncthreads();
  tile::store_transposed(t, out, ld, r0, c0, rows, cols);
}

void transpose_into_cuda(const at::Tensor& values, const at::Tensor& out, int64_t first_column) {
  TORCH_CHECK(values.dim() == 2 && values.element_size() == 1,
              "fp8_transpose: a 2-D matrix of one-byte values, got ", values.sizes());
  const auto in = values.contiguous();
  const int64_t rows = in.size(0), cols = in.size(1), ld = out.size(1);
  TORCH_CHECK(values.scalar_type() == at::kFloat8_e4m3fn,
              "fp8_transpose_into: values must be float8_e4m3fn, got ", values.scalar_type());
  tile::check_transposed_out("fp8_transpose_into", rows, cols, out, first_column, in.device());
  if (rows == 0 || cols == 0) return;
  auto* dst = static_cast<uint8_t*>(out.data_ptr()) + first_column;
  if (!tile::words_fit(rows, cols, ld, first_column, in.data_ptr(), dst)) {
    out.narrow(1, first_column, rows).copy_(in.t());  // LibTorch's copy, a byte per thread
    return;
  }
  c10::cuda::CUDAGuard guard(in.device());
  const dim3 grid((cols + tile::kTile - 1) / tile::kTile, (rows + tile::kTile - 1) / tile::kTile);
  transpose_bytes_kernel<<<grid, tile::kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      static_cast<const uint8_t*>(in.data_ptr()), dst, ld, rows, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor transpose_cuda(const at::Tensor& values) {
  TORCH_CHECK(values.dim() == 2, "fp8_transpose: values must be 2-D, got ", values.sizes());
  auto out = at::empty({values.size(1), values.size(0)}, values.options());
  transpose_into_cuda(values, out, 0);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("fp8_quantize_rows", quantize_rows_cuda);
  m.impl("fp8_transpose", transpose_cuda);
  m.impl("fp8_transpose_into", transpose_into_cuda);
}

}  // namespace kubetune::kernels
