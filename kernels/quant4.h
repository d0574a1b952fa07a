// bitsandbytes' 4-bit weight formats (QLoRA): NF4 and FP4 codes in blocks of `blocksize` values,
// each block scaled by its absolute maximum, with optional double quantization of those absmax
// values (8-bit dynamic code in blocks of 256, after subtracting their mean).
//
// The CPU implementation is bitsandbytes 0.50's CPU path to the bit (codes, absmax, nested absmax,
// offset; tests/kernels/quant4_test.py checks it against bitsandbytes), so a weight quantized here
// and one quantized by PEFT+bitsandbytes on the CPU are the same bytes. The CUDA kernels use the
// same IEEE float32 arithmetic (no fast math), so they agree with the CPU reference; bitsandbytes'
// own CUDA kernel differs from its CPU path in rare ties (approximate reciprocal), which the GPU
// test counts. Registered as kubetune::quantize_4bit, kubetune::dequantize_4bit and
// kubetune::quantize_8bit_blockwise (TORCH_LIBRARY), so Python tests call them too.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

namespace kubetune::kernels {

// One quantized weight: bitsandbytes' QuantState.
struct Quant4State {
  torch::Tensor packed;         // uint8 [ceil(n/2), 1]; element 2i in the high nibble of byte i
  torch::Tensor absmax;         // float32 [blocks], or uint8 [blocks] with double quantization
  torch::Tensor nested_absmax;  // float32 [ceil(blocks/256)]; undefined without double quant
  double offset = 0;            // the mean of the absmax values (a float32), double quant only
  std::string type;             // "nf4" | "fp4"
  int64_t blocksize = 64;
  std::vector<int64_t> shape;  // of the weight, [out, in]
  bool double_quant() const { return nested_absmax.defined(); }
  int64_t bytes() const;  // device memory it takes
};

// The block sizes bitsandbytes writes and the kernels take: a power of two from 32 to 4096.
constexpr bool valid_blocksize_4bit(int64_t blocksize) {
  return blocksize >= 32 && blocksize <= 4096 && (blocksize & (blocksize - 1)) == 0;
}
void check_blocksize_4bit(int64_t blocksize);  // throws c10::Error naming it unless valid

// Quantizes `weight` (bf16, fp16 or fp32, any device) with bitsandbytes' rules.
// blocksize: 32..4096, a power of two; type: "nf4" or "fp4".
Quant4State quantize_4bit(const torch::Tensor& weight, const std::string& type, int64_t blocksize,
                          bool double_quant);

// The weight back in `dtype`, on the state's device: code * absmax in float32, rounded once.
torch::Tensor dequantize_4bit(const Quant4State& state, torch::ScalarType dtype);

// The 16 values of a 4-bit code book ("nf4", "fp4") and bitsandbytes' signed 8-bit dynamic map
// (the double quantization's code), as float32 CPU tensors, as checkpoints store them
// (weight.quant_map, weight.nested_quant_map).
torch::Tensor code_book_4bit(const std::string& type);
torch::Tensor dynamic_map_8bit();

}  // namespace kubetune::kernels
