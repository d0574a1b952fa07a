// Device helpers shared by the kernels that read bitsandbytes' 4-bit weights (kernels/quant4.h):
// the double quantization's code, the code book, and a block's scale, with the CPU reference's
// float32 arithmetic (__fmul_rn, __fadd_rn: never contracted into a fused multiply-add).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "kernels/quant4.h"
#include "kernels/quant4_codes.h"

namespace kubetune::kernels::quant4 {
namespace {  // each translation unit keeps its own copy of the constant table

__constant__ uint32_t kDeviceDynamicMap[256] = {KUBETUNE_DYNAMIC_MAP_BITS};

inline CodeBook device_code_book(c10::string_view type_view) {
  const std::string type(type_view);
  TORCH_CHECK(type == "nf4" || type == "fp4", "4-bit quantization type must be nf4 or fp4");
  return make_code_book(type == "nf4");
}

// Where a weight's block scales are: stored float32 absmax values, or the double quantization's
// 8-bit codes of them with the nested absmax and offset (then `absmax` is null).
struct BlockScales {
  const float* absmax;
  const uint8_t* absmax_codes;
  const float* nested;
  float offset;
  int blocksize_log2;  // block sizes are powers of two: a shift, not a 64-bit division

  // The scale of the block holding value `value_index` of the flattened weight: stored, or
  // decoded as code * nested absmax + offset (two roundings, like the CPU), the code's value read
  // from `map` (load_tables).
  template <bool kNested>
  __device__ float of(int64_t value_index, const float* map) const {
    const int64_t blk = value_index >> blocksize_log2;
    if constexpr (kNested) {
      return __fadd_rn(__fmul_rn(map[absmax_codes[blk]], nested[blk / kNestedBlocksize]), offset);
    } else {
      return absmax[blk];
    }
  }
};

// The contiguous float32 (or code) tensors a BlockScales points into, kept alive with it.
struct BlockScaleTensors {
  at::Tensor absmax, nested;
  BlockScales view{};
  BlockScaleTensors(const at::Tensor& absmax_in, const c10::optional<at::Tensor>& nested_in,
                    double offset, int64_t blocksize) {
    const bool double_quant = nested_in.has_value() && nested_in->defined();
    absmax = double_quant ? absmax_in.contiguous() : absmax_in.to(at::kFloat).contiguous();
    if (double_quant) nested = nested_in->to(at::kFloat).contiguous();
    check_blocksize_4bit(blocksize);  // a power of two: of() shifts; at least 8: one scale a pack
    int log2 = 0;
    while ((int64_t{1} << log2) < blocksize) ++log2;
    view = {double_quant ? nullptr : absmax.data_ptr<float>(),
            double_quant ? absmax.data_ptr<uint8_t>() : nullptr,
            double_quant ? nested.data_ptr<float>() : nullptr, static_cast<float>(offset), log2};
  }
  bool double_quant() const { return view.absmax_codes != nullptr; }
};

// launch(std::true_type{}) with double quantization, else launch(std::false_type{}): the kernels
// take it as their kNested template argument.
template <typename Launch>
void with_nested(bool double_quant, Launch&& launch) {
  if (double_quant) {
    launch(std::true_type{});
  } else {
    launch(std::false_type{});
  }
}

// The code book in shared memory: indexing the kernel's parameters with a runtime value would put
// them in local memory.
__device__ void load_code_book(const CodeBook& book, float* code) {
  if (threadIdx.x < 16) code[threadIdx.x] = book.values[threadIdx.x];
  __syncthreads();
}

// The code book and, with double quantization, the dynamic map of the absmax codes in shared
// memory (`map` [256]). The map stays out of constant memory because a warp reads several
// different codes at once, which the constant cache serves one after another.
template <bool kNested>
__device__ void load_tables(const CodeBook& book, float* code, float* map) {
  if constexpr (kNested)
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
      map[i] = __uint_as_float(kDeviceDynamicMap[i]);
  load_code_book(book, code);
}

}  // namespace
}  // namespace kubetune::kernels::quant4
