// The base path of a QLoRA linear layer: y = x W^T with W stored in 4 bits (kernels/quant4.h).
// W is dequantized into the compute dtype for the matmul and dropped; backward dequantizes it
// again instead of keeping it, so a step holds one layer's bf16 weight at a time, not the model's.
// The frozen W gets no gradient; x does. Like bitsandbytes' MatMul4Bit: dequantize, then cuBLAS.
#pragma once

#include <torch/csrc/autograd/custom_function.h>
#include <torch/types.h>

#include <vector>

#include "kernels/quant4.h"

namespace kubetune::model {

// A 4-bit weight kept by an autograd node for its backward: its tensors saved (never copied),
// followed by `more` tensors of the node's own, its scalars in saved_data. (Also used by the
// 4-bit expert stacks, experts.cpp.)
void save_quant4_for_backward(torch::autograd::AutogradContext* ctx, const kernels::Quant4State& s,
                              std::vector<torch::Tensor> more = {});
// That weight back, in backward; the node's own tensors follow at saved index 3.
kernels::Quant4State restore_quant4(torch::autograd::AutogradContext* ctx);

torch::Tensor linear_4bit(const torch::Tensor& x, const kernels::Quant4State& weight,
                          torch::ScalarType compute_dtype);

}  // namespace kubetune::model
