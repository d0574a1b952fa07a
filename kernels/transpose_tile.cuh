// A 64 x 64 tile of one-byte values transposed through shared memory, for the kernel that writes
// an FP8 matrix's transpose (kernels/fp8_cuda.cu); its checks of the output serve
// kernels/fp8_from_4bit_cuda.cu's 128 x 128 tiles too. The kernel fills the tile (word() and
// first_row() give the 4-bytes-a-thread mapping: 16 threads a row, 16 rows a pass);
// store_transposed writes 4 consecutive bytes of an output row a thread. A byte per thread ran at
// a tenth of the memory bandwidth.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

namespace kubetune::kernels::tile {

constexpr int kTile = 64, kWordsPerRow = kTile / 4, kThreads = 256;
constexpr int kRowsPerPass = kThreads / kWordsPerRow;

struct Tile {
  alignas(4) uint8_t bytes[kTile][kTile + 4];  // + 4: reads down a column hit different banks
};

// This thread's word of a tile row, and its first row.
__device__ inline int word() { return threadIdx.x % kWordsPerRow; }
__device__ inline int first_row() { return threadIdx.x / kWordsPerRow; }

// After the tile is filled (and a __syncthreads): its transpose into out, the first `rows`
// columns of a [cols, ld] matrix, for the tile at input row r0 and column c0 of a [rows, cols] one
// (rows, cols, ld multiples of 4, out 4-byte aligned).
__device__ inline void store_transposed(const Tile& t, uint8_t* __restrict__ out, int64_t ld,
                                        int64_t r0, int64_t c0, int64_t rows, int64_t cols) {
  for (int i = first_row(); i < kTile; i += kRowsPerPass) {
    const int64_t out_row = c0 + i, out_col = r0 + word() * 4;
    if (out_row < cols && out_col < rows) {
      const int k = word() * 4;
      const uint32_t packed = uint32_t(t.bytes[k][i]) | uint32_t(t.bytes[k + 1][i]) << 8 |
                              uint32_t(t.bytes[k + 2][i]) << 16 | uint32_t(t.bytes[k + 3][i]) << 24;
      *reinterpret_cast<uint32_t*>(out + out_row * ld + out_col) = packed;
    }
  }
}

// Whether a [rows, cols] byte matrix at `in` can be transposed by tiles into columns
// [first_column, first_column + rows) of a [cols, ld] one at `out`: 4-byte words that straddle no
// row on either side.
inline bool words_fit(int64_t rows, int64_t cols, int64_t ld, int64_t first_column, const void* in,
                      const void* out) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 4 == 0; };
  return rows % 4 == 0 && cols % 4 == 0 && ld % 4 == 0 && first_column % 4 == 0 && aligned(in) &&
         aligned(out);
}

// Checks that `out` ([cols, ld] float8_e4m3fn, contiguous, on `device`) can take a [rows, cols]
// matrix's transpose at `first_column`. The kernels write E4M3 bytes: another one-byte dtype would
// take them as its own.
inline void check_transposed_out(const char* op, int64_t rows, int64_t cols, const at::Tensor& out,
                                 int64_t first_column, const c10::Device& device) {
  TORCH_CHECK(out.dim() == 2 && out.scalar_type() == at::kFloat8_e4m3fn && out.is_contiguous() &&
                  out.size(0) == cols && first_column >= 0 && first_column + rows <= out.size(1),
              op, ": out must be a contiguous float8_e4m3fn [", cols, ", >= ", first_column + rows,
              "] matrix, got ", out.scalar_type(), " ", out.sizes());
  TORCH_CHECK(out.device() == device, op, ": out is on ", out.device(), ", the input on ", device);
}

}  // namespace kubetune::kernels::tile
