// The 4-bit quantization's C++ API (kernels/quant4.h): double quantization composed as
// bitsandbytes composes it, dequantization within the code book's spacing of the weights, and the
// CUDA kernels equal to the CPU reference byte for byte (skipped, visibly, without a GPU).
// quant4_test.py checks the CPU reference against bitsandbytes itself.
#include "kernels/quant4.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

torch::Tensor weights(std::vector<int64_t> shape, torch::ScalarType dtype) {
  torch::manual_seed(0);
  return (torch::randn(shape) * 0.02).to(dtype);
}

TEST(Quant4, DoubleQuantizationIsTheMeanRemovedThen8BitBlocks) {
  const auto w = weights({96, 160}, torch::kBFloat16);
  const Quant4State plain = quantize_4bit(w, "nf4", 64, false);
  const Quant4State dq = quantize_4bit(w, "nf4", 64, true);
  EXPECT_TRUE(torch::equal(plain.packed, dq.packed));
  EXPECT_EQ(dq.absmax.scalar_type(), torch::kUInt8);
  EXPECT_EQ(dq.nested_absmax.numel(), (96 * 160 / 64 + 255) / 256);
  EXPECT_FLOAT_EQ(dq.offset, plain.absmax.mean().item<float>());
  // The decoded scales are within the 8-bit code's resolution of the stored ones.
  const auto a = dequantize_4bit(plain, torch::kFloat32), b = dequantize_4bit(dq, torch::kFloat32);
  EXPECT_LT((a - b).abs().max().item<double>(), 0.02 * plain.absmax.max().item<double>());
  EXPECT_LT(dq.bytes(), plain.bytes());
}

TEST(Quant4, DequantizedWeightsAreWithinHalfACodeGap) {
  for (const char* type : {"nf4", "fp4"}) {
    for (int64_t blocksize : {32, 64, 256}) {
      const auto w = weights({40, 96}, torch::kFloat32);
      const Quant4State s = quantize_4bit(w, type, blocksize, false);
      const auto back = dequantize_4bit(s, torch::kFloat32);
      ASSERT_EQ(back.sizes(), w.sizes());
      // Per block, the error is at most half the widest gap of the code book (NF4: 0.30, FP4:
      // 0.33 of the block's absmax).
      const auto err = (back - w).abs().reshape({-1, blocksize}).amax(1);
      EXPECT_TRUE((err <= s.absmax * 0.17 + 1e-12).all().item<bool>()) << type << " " << blocksize;
      // Re-quantizing the dequantized NF4 weights gives the same codes.
      if (std::string(type) == "nf4") {
        EXPECT_TRUE(torch::equal(quantize_4bit(back, type, blocksize, false).packed, s.packed));
      }
    }
  }
}

TEST(Quant4, RejectsBadBlocksizeAndType) {
  const auto w = weights({8, 64}, torch::kFloat32);
  EXPECT_THROW(quantize_4bit(w, "nf4", 48, false), c10::Error);
  EXPECT_THROW(quantize_4bit(w, "int4", 64, false), c10::Error);
}

TEST(Quant4, CudaKernelsEqualTheCpuReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  for (auto dtype : {torch::kBFloat16, torch::kFloat16, torch::kFloat32}) {
    for (const char* type : {"nf4", "fp4"}) {
      for (bool dq : {false, true}) {
        auto w = weights({257, 131}, dtype);  // odd count, partial last block
        w.view(-1).slice(0, 0, 64).zero_();   // a zero block
        const Quant4State cpu = quantize_4bit(w, type, 64, dq);
        const Quant4State gpu = quantize_4bit(w.cuda(), type, 64, dq);
        EXPECT_TRUE(torch::equal(cpu.packed, gpu.packed.cpu())) << type << " " << dtype;
        EXPECT_TRUE(torch::equal(cpu.absmax, gpu.absmax.cpu())) << type << " " << dtype;
        for (auto out : {torch::kBFloat16, torch::kFloat32}) {
          EXPECT_TRUE(torch::equal(dequantize_4bit(cpu, out), dequantize_4bit(gpu, out).cpu()))
              << type << " " << dtype << " double=" << dq;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kubetune::kernels
