// CUDA implementation of kubetune::fp8_from_4bit: each 4-bit value decoded, rounded to the compute
// dtype, scaled by 448 / its row's maximum and rounded to E4M3, in the float32 arithmetic of
// dequantize_4bit's and fp8_quantize_rows's kernels, so the bytes are the composition's. Two
// kernels: rows as they are (16 values a thread: an 8-byte load, a 16-byte store), and transposed
// through a shared-memory tile.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_fp8.h>
#include <torch/library.h>

#include <type_traits>

#include "kernels/fp8.h"
#include "kernels/launch.cuh"
#include "kernels/quant4_device.cuh"
#include "kernels/transpose_tile.cuh"

namespace kubetune::kernels {
namespace {

using namespace quant4;

// One value: the code times its block's scale, rounded to T (dequantize_4bit's value), times the
// row's 448 / amax, rounded to E4M3 saturating (fp8_quantize_rows's).
template <typename T>
__device__ uint8_t fp8_value(float code, float scale, float inv) {
  const float w = static_cast<float>(static_cast<T>(__fmul_rn(code, scale)));
  return __nv_cvt_float_to_fp8(__fmul_rn(w, inv), __NV_SATFINITE, __NV_E4M3);
}

template <typename T, bool kNested>
__global__ void fp8_from_4bit_rows_kernel(const uint2* __restrict__ packed, BlockScales scales,
                                          const float* __restrict__ row_amax,
                                          uint4* __restrict__ out, int64_t groups, int64_t cols,
                                          CodeBook book) {
  __shared__ float code[16], map[256];
  load_tables<kNested>(book, code, map);
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
       g += int64_t(blockDim.x) * gridDim.x) {
    const uint2 bits = packed[g];
    const float scale = scales.template of<kNested>(g * 16, map);
    const float inv = kFp8Max / row_amax[g * 16 / cols];
    __align__(16) uint8_t v[16];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t byte = ((j < 4 ? bits.x : bits.y) >> (8 * (j % 4))) & 0xFF;  // little-endian
      v[2 * j] = fp8_value<T>(code[byte >> 4], scale, inv);
      v[2 * j + 1] = fp8_value<T>(code[byte & 0xF], scale, inv);
    }
    out[g] = *reinterpret_cast<const uint4*>(v);
  }
}

// The transposed form, a 128 x 128 tile at a time. Each thread decodes 16 values (one 8-byte
// load) of a tile row in each of 4 passes, all four loads issued before any decoding; then each
// thread transposes 4 x 4 bytes of the tile in registers and a warp writes 32 consecutive words
// (128 bytes) of an output row. On an H100 (bench/fp8_rows_probe.py, a [14336, 4096] weight)
// this takes 72-76 us where a 64 x 64 tile read from shared memory a byte per value took 79-85; the
// rows kernel takes 52-59. Why the transpose stays slower than the rows is not known.
constexpr int kTile = 128, kTileThreads = 256, kValuesPerThread = 16;
constexpr int kThreadsPerTileRow = kTile / kValuesPerThread;         // 8
constexpr int kTileRowsPerPass = kTileThreads / kThreadsPerTileRow;  // 32
constexpr int kPasses = kTile / kTileRowsPerPass;                    // 4
constexpr int kTileWords = kTile / 4;

// Where word `word` of tile row `row` is kept: XOR-swizzled so that neither side meets a bank
// conflict, the 4 rows x 8 threads of a warp writing 32 words, nor the 32 lanes reading word q of
// rows 4l + j.
__device__ inline int swizzled(int row, int word) { return word ^ (row >> 2) ^ (row & 3); }

// The 4 x 4 bytes of rows w0..w3 transposed: word b holds byte b of w0, w1, w2 and w3, in order.
__device__ inline void transpose_4x4(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3,
                                     uint32_t (&out)[4]) {
  const uint32_t lo01 = __byte_perm(w0, w1, 0x5140), lo23 = __byte_perm(w2, w3, 0x5140);
  const uint32_t hi01 = __byte_perm(w0, w1, 0x7362), hi23 = __byte_perm(w2, w3, 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

// 8 values of packed bits (4 bytes, little-endian, high nibble first) as two words of E4M3 bytes.
template <typename T>
__device__ inline uint2 fp8_words(uint32_t bits, const float* code, float scale, float inv) {
  uint32_t v[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t byte = (bits >> (8 * j)) & 0xFF;
    v[2 * j] = fp8_value<T>(code[byte >> 4], scale, inv);
    v[2 * j + 1] = fp8_value<T>(code[byte & 0xF], scale, inv);
  }
  return {v[0] | v[1] << 8 | v[2] << 16 | v[3] << 24, v[4] | v[5] << 8 | v[6] << 16 | v[7] << 24};
}

template <typename T, bool kNested>
__global__ void __launch_bounds__(kTileThreads)
    fp8_from_4bit_transposed_kernel(const uint2* __restrict__ packed, BlockScales scales,
                                    const float* __restrict__ row_amax, uint8_t* __restrict__ out,
                                    int64_t ld, int64_t rows, int64_t cols, CodeBook book) {
  __shared__ float code[16], map[256];
  __shared__ uint32_t shared_tile[kTile][kTileWords];
  load_tables<kNested>(book, code, map);
  const int64_t r0 = int64_t(blockIdx.y) * kTile, c0 = int64_t(blockIdx.x) * kTile;
  const int part = threadIdx.x % kThreadsPerTileRow, first_row = threadIdx.x / kThreadsPerTileRow;
  const int64_t c = c0 + part * kValuesPerThread;  // cols is a multiple of 16: all 16 or none
  uint2 bits[kPasses];
  float scale[kPasses], inv[kPasses];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t r = r0 + first_row + p * kTileRowsPerPass;
    if (r < rows && c < cols) {
      const int64_t first = r * cols + c;  // a multiple of 16: within one block's scale
      bits[p] = packed[first / kValuesPerThread];
      scale[p] = scales.template of<kNested>(first, map);
      inv[p] = kFp8Max / row_amax[r];
    }
  }
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int i = first_row + p * kTileRowsPerPass;
    if (r0 + i < rows && c < cols) {
      const uint2 lo = fp8_words<T>(bits[p].x, code, scale[p], inv[p]),
                  hi = fp8_words<T>(bits[p].y, code, scale[p], inv[p]);
      const uint32_t words[4] = {lo.x, lo.y, hi.x, hi.y};
#pragma unroll
      for (int k = 0; k < 4; ++k) shared_tile[i][swizzled(i, part * 4 + k)] = words[k];
    }
  }
  __syncthreads();
  // Lane l holds tile rows 4l..4l+3 (output columns r0 + 4l..), word q their columns 4q..4q+3
  // (output rows c0 + 4q..); rows is a multiple of 16, so a word's 4 rows are all in or all out.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t out_col = r0 + 4 * lane;
  for (int q = warp; q < kTile / 4; q += kTileThreads / 32) {
    uint32_t t[4];
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) w[j] = shared_tile[4 * lane + j][swizzled(4 * lane + j, q)];
    transpose_4x4(w[0], w[1], w[2], w[3], t);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const int64_t out_row = c0 + 4 * q + b;
      if (out_row < cols && out_col < rows)
        *reinterpret_cast<uint32_t*>(out + out_row * ld + out_col) = t[b];
    }
  }
}

// The weight's FP8 rows written at `out`: as they are, or transposed into the first `rows` columns
// of a [cols, ld] matrix.
void convert(const at::Tensor& packed, const at::Tensor& absmax,
             const c10::optional<at::Tensor>& nested_absmax, double offset, c10::IntArrayRef shape,
             int64_t blocksize, c10::string_view type, c10::ScalarType dtype,
             const at::Tensor& row_amax, uint8_t* out, bool transposed, int64_t ld) {
  const int64_t rows = shape[0], cols = shape[1];
  // One scale for 16 (or 8) consecutive values: blocks of a power of two from 32.
  TORCH_CHECK(blocksize >= 32 && (blocksize & (blocksize - 1)) == 0,
              "fp8_from_4bit: blocksize must be a power of two of at least 32, got ", blocksize);
  TORCH_CHECK(row_amax.device() == packed.device(), "fp8_from_4bit: row maxima on ",
              row_amax.device(), ", the weight on ", packed.device());
  c10::cuda::CUDAGuard guard(packed.device());
  const at::Tensor bytes = packed.contiguous().view(at::kByte).reshape(-1);
  TORCH_CHECK(bytes.numel() * 2 >= rows * cols, "fp8_from_4bit: too few packed bytes");
  TORCH_CHECK(reinterpret_cast<uintptr_t>(bytes.data_ptr()) % 8 == 0,
              "fp8_from_4bit: the packed weight must be 8-byte aligned");
  const BlockScaleTensors block_scales(absmax, nested_absmax, offset, blocksize);
  const BlockScales& scales = block_scales.view;
  const at::Tensor amax = row_amax.to(at::kFloat).contiguous();
  const CodeBook book = device_code_book(type);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "fp8_from_4bit", [&] {
    auto launch = [&](auto nested_tag) {
      constexpr bool kNested = decltype(nested_tag)::value;
      if (transposed) {
        const dim3 grid(cols / kTile + (cols % kTile != 0), rows / kTile + (rows % kTile != 0));
        fp8_from_4bit_transposed_kernel<scalar_t, kNested>
            <<<grid, kTileThreads, 0, stream>>>(static_cast<const uint2*>(bytes.data_ptr()), scales,
                                                amax.data_ptr<float>(), out, ld, rows, cols, book);
      } else {
        const int64_t groups = rows * cols / 16;
        fp8_from_4bit_rows_kernel<scalar_t, kNested><<<blocks_for(groups), kThreads, 0, stream>>>(
            static_cast<const uint2*>(bytes.data_ptr()), scales, amax.data_ptr<float>(),
            reinterpret_cast<uint4*>(out), groups, cols, book);
      }
    };
    with_nested(block_scales.double_quant(), launch);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void check_shape(c10::IntArrayRef shape, const at::Tensor& row_amax) {
  TORCH_CHECK(shape.size() == 2 && shape[0] % 16 == 0 && shape[1] % 16 == 0,
              "fp8_from_4bit: a weight whose sizes are multiples of 16, got ", shape);
  TORCH_CHECK(row_amax.numel() == shape[0], "fp8_from_4bit: ", row_amax.numel(), " row maxima for ",
              shape[0], " rows");
}

void fp8_from_4bit_transposed_into_cuda(const at::Tensor& packed, const at::Tensor& absmax,
                                        const c10::optional<at::Tensor>& nested_absmax,
                                        double offset, c10::IntArrayRef shape, int64_t blocksize,
                                        c10::string_view type, c10::ScalarType dtype,
                                        const at::Tensor& row_amax, const at::Tensor& out,
                                        int64_t first_column) {
  check_shape(shape, row_amax);
  const int64_t rows = shape[0], cols = shape[1];
  tile::check_transposed_out("fp8_from_4bit_transposed_into", rows, cols, out, first_column,
                             packed.device());
  if (rows == 0 || cols == 0) return;
  auto* dst = static_cast<uint8_t*>(out.data_ptr()) + first_column;
  TORCH_CHECK(tile::words_fit(rows, cols, out.size(1), first_column, packed.data_ptr(), dst),
              "fp8_from_4bit_transposed_into: out's width and first column must be multiples of 4");
  convert(packed, absmax, nested_absmax, offset, shape, blocksize, type, dtype, row_amax, dst,
          /*transposed=*/true, out.size(1));
}

at::Tensor fp8_from_4bit_cuda(const at::Tensor& packed, const at::Tensor& absmax,
                              const c10::optional<at::Tensor>& nested_absmax, double offset,
                              c10::IntArrayRef shape, int64_t blocksize, c10::string_view type,
                              c10::ScalarType dtype, const at::Tensor& row_amax) {
  check_shape(shape, row_amax);
  auto out = at::empty(shape, packed.options().dtype(at::kFloat8_e4m3fn));
  if (out.numel() == 0) return out;
  convert(packed, absmax, nested_absmax, offset, shape, blocksize, type, dtype, row_amax,
          static_cast<uint8_t*>(out.data_ptr()), /*transposed=*/false, /*ld=*/0);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("fp8_from_4bit", fp8_from_4bit_cuda);
  m.impl("fp8_from_4bit_transposed_into", fp8_from_4bit_transposed_into_cuda);
}

}  // namespace kubetune::kernels
