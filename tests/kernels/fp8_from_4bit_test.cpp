// FP8 rows straight from 4-bit codes (kernels/fp8_from_4bit.h): the same bytes and scales as
// dequantizing and quantizing the rows (kernels/quant4.h, kernels/fp8.h), on the CPU and, where
// there is a GPU of compute capability 9.0+, the CUDA kernels against the CPU (else skipped,
// visibly).
#include "kernels/fp8_from_4bit.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "kernels/fp8.h"

namespace kubetune::kernels {
namespace {

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::equal(a.cpu().view(torch::kUInt8), b.cpu().view(torch::kUInt8));
}

// A weight with rows of very different magnitudes and one all-zero row.
Quant4State sample_state(int64_t rows, int64_t cols, const std::string& type, bool double_quant) {
  auto w = torch::randn({rows, cols}) * torch::logspace(-2, 1, rows).view({-1, 1});
  w[2].zero_();
  return quantize_4bit(w.to(torch::kBFloat16), type, 64, double_quant);
}

Quant4State on_cuda(Quant4State s) {
  s.packed = s.packed.cuda();
  s.absmax = s.absmax.cuda();
  if (s.double_quant()) s.nested_absmax = s.nested_absmax.cuda();
  return s;
}

TEST(Fp8From4bit, CpuEqualsDequantizingThenQuantizingTheRows) {
  torch::manual_seed(0);
  for (bool double_quant : {false, true}) {
    const auto s = sample_state(48, 128, "nf4", double_quant);
    const auto composed = quantize_rows_fp8(dequantize_4bit(s, torch::kBFloat16));
    const auto amax = row_amax_4bit(s, torch::kBFloat16);
    EXPECT_TRUE(torch::equal(fp8_row_scales(amax), composed.scales));
    const auto values = fp8_from_4bit(s, amax, torch::kBFloat16, /*transposed=*/false);
    EXPECT_TRUE(same_bytes(values, composed.values)) << "double quant " << double_quant;
    const auto t = fp8_from_4bit(s, amax, torch::kBFloat16, /*transposed=*/true);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{128, 48}));
    EXPECT_TRUE(same_bytes(t, transpose_fp8(composed.values)));
  }
}

TEST(Fp8From4bit, CpuTransposesBesideOtherColumns) {
  const auto s = sample_state(48, 64, "nf4", true);
  const auto amax = row_amax_4bit(s, torch::kBFloat16);
  auto out = torch::zeros({64, 16 + 48}, torch::kFloat8_e4m3fn);
  fp8_from_4bit_transposed_into(s, amax, torch::kBFloat16, out, 16);
  EXPECT_TRUE(same_bytes(out.narrow(1, 16, 48), fp8_from_4bit(s, amax, torch::kBFloat16, true)));
  EXPECT_TRUE(same_bytes(out.narrow(1, 0, 16), torch::zeros({64, 16}, torch::kFloat8_e4m3fn)));
  EXPECT_THROW(fp8_from_4bit_transposed_into(s, amax, torch::kBFloat16, out, 17), c10::Error);
}

TEST(Fp8From4bit, RejectsRowMaximaOfAnotherShape) {
  const auto s = sample_state(16, 64, "nf4", false);
  EXPECT_THROW(fp8_from_4bit(s, torch::ones({15}), torch::kBFloat16, false), c10::Error);
}

TEST(Fp8From4bit, CudaMatchesCpu) {
  if (!torch::cuda::is_available() || !fp8_supported_on(torch::Device(torch::kCUDA, 0)))
    GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  torch::manual_seed(1);
  // Whole 128 x 128 tiles (the transposed kernel's), partial ones (a last tile 16 wide, where one
  // thread of each tile row has values), and an 8B layer's width.
  for (auto shape : {std::vector<int64_t>{256, 4096}, {208, 336}, {144, 272}, {48, 1024}})
    for (const std::string type : {"nf4", "fp4"})
      for (bool double_quant : {false, true})
        for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
          const auto cpu = sample_state(shape[0], shape[1], type, double_quant);
          const auto gpu = on_cuda(cpu);
          const auto amax = row_amax_4bit(cpu, dtype);
          EXPECT_TRUE(torch::equal(row_amax_4bit(gpu, dtype).cpu(), amax));
          // The scales as the GPU's row quantization makes them, to the bit.
          const auto composed = quantize_rows_fp8(dequantize_4bit(gpu, dtype));
          EXPECT_TRUE(torch::equal(fp8_row_scales(amax.cuda()), composed.scales));
          for (bool transposed : {false, true}) {
            EXPECT_TRUE(same_bytes(fp8_from_4bit(gpu, amax.cuda(), dtype, transposed),
                                   fp8_from_4bit(cpu, amax, dtype, transposed)))
                << shape[0] << " x " << shape[1] << " " << type << " double quant " << double_quant
                << " dtype " << dtype << " transposed " << transposed;
          }
          // Transposed beside another weight's columns, which it leaves alone.
          auto beside = torch::zeros({shape[1], shape[0] + 16}, torch::kFloat8_e4m3fn);
          auto on_gpu = beside.cuda();
          fp8_from_4bit_transposed_into(cpu, amax, dtype, beside, 16);
          fp8_from_4bit_transposed_into(gpu, amax.cuda(), dtype, on_gpu, 16);
          EXPECT_TRUE(same_bytes(on_gpu, beside));
          EXPECT_TRUE(same_bytes(beside.narrow(1, 16, shape[0]),
                                 fp8_from_4bit(cpu, amax, dtype, /*transposed=*/true)));
        }
}

}  // namespace
}  // namespace kubetune::kernels
