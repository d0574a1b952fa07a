// OCP's MXFP4, as OpenAI publishes gpt-oss's experts: each stack as `NAME_blocks` (uint8, two
// 4-bit E2M1 codes a byte, low nibble first) and `NAME_scales` (uint8, one power-of-two exponent
// biased by 127 for each 32 values), in the [E, out, in] orientation.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace kubetune::io {

// blocks [..., G, 16] and scales [..., G] made whole: [..., G * 32] in `dtype`, each value
// code * 2^(scale - 127), as transformers' convert_moe_packed_tensors computes it (before its
// transpose). `name` is for errors.
at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales,
                            at::ScalarType dtype, const std::string& name);

}  // namespace kubetune::io
