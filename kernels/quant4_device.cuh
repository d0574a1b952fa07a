// Device helpers shared by the kernels that read bitsandbytes' 4-bit weights (kernels/quant4.h):
// the double quantization's code, the code book, and a block's scale, with the CPU reference's
// float32 arithmetic (__fmul_rn, __fadd_rn: never contracted into a fused multiply-add).
#pragma once

#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <string>

#include "kernels/quant4_codes.h"

namespace kubetune::kernels::quant4 {
namespace {  // each translation unit keeps its own copy of the constant table

__constant__ uint32_t kDeviceDynamicMap[256] = {KUBETUNE_DYNAMIC_MAP_BITS};

inline CodeBook device_code_book(c10::string_view type_view) {
  const std::string type(type_view);
  TORCH_CHECK(type == "nf4" || type == "fp4", "4-bit quantization type must be nf4 or fp4");
  return make_code_book(type == "nf4");
}

// The scale of 4-bit block `blk`: stored, or decoded from the double quantization as
// code * nested absmax + offset (two roundings, like the CPU).
template <bool kNested>
__device__ float block_scale(int64_t blk, const float* __restrict__ absmax,
                             const uint8_t* __restrict__ absmax_codes,
                             const float* __restrict__ nested, float offset) {
  if constexpr (kNested) {
    const float code = __uint_as_float(kDeviceDynamicMap[absmax_codes[blk]]);
    return __fadd_rn(__fmul_rn(code, nested[blk / kNestedBlocksize]), offset);
  } else {
    return absmax[blk];
  }
}

// The code book in shared memory: indexing the kernel's parameters with a runtime value would put
// them in local memory.
__device__ void load_code_book(const CodeBook& book, float* code) {
  if (threadIdx.x < 16) code[threadIdx.x] = book.values[threadIdx.x];
  __syncthreads();
}

}  // namespace
}  // namespace kubetune::kernels::quant4
