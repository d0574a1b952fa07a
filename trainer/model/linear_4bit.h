// The base path of a QLoRA linear layer: y = x W^T with W stored in 4 bits (kernels/quant4.h).
// W is dequantized into the compute dtype for the matmul and dropped; backward dequantizes it
// again instead of keeping it, so a step holds one layer's bf16 weight at a time, not the model's.
// The frozen W gets no gradient; x does. Like bitsandbytes' MatMul4Bit: dequantize, then cuBLAS.
#pragma once

#include <torch/types.h>

#include "kernels/quant4.h"

namespace kubetune::model {

torch::Tensor linear_4bit(const torch::Tensor& x, const kernels::Quant4State& weight,
                          torch::ScalarType compute_dtype);

}  // namespace kubetune::model
