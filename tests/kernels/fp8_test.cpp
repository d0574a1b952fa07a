// Row-wise FP8 quantization and products (kernels/fp8.h): the CPU reference against exact float
// arithmetic and E4M3's rounding bound, the CUDA kernel and cuBLASLt's product against the CPU
// reference (skipped, visibly, without a GPU of compute capability 9.0+).
#include "kernels/fp8.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

// Rows of very different magnitudes, one all-zero row, odd and 16-byte-friendly widths.
torch::Tensor sample(int64_t rows, int64_t cols, torch::ScalarType dtype) {
  auto x = torch::randn({rows, cols}) * torch::logspace(-3, 3, rows).view({-1, 1});
  x[1].zero_();
  return x.to(dtype);
}

TEST(Fp8, CpuRowsAreWithinE4m3RoundingOfTheInput) {
  torch::manual_seed(0);
  for (int64_t cols : {64, 37}) {
    auto x = sample(9, cols, torch::kFloat32);
    auto q = quantize_rows_fp8(x);
    ASSERT_EQ(q.values.scalar_type(), torch::kFloat8_e4m3fn);
    ASSERT_EQ(q.scales.sizes(), (std::vector<int64_t>{9, 1}));
    auto back = dequantize_rows_fp8(q, torch::kFloat32);
    // E4M3 keeps 3 mantissa bits: relative error 2^-4 for normal values, and the subnormal step
    // 2^-9 (times the row's scale) below them.
    auto bound = x.abs() / 16 + q.scales * std::pow(2.0, -9);
    EXPECT_TRUE(((back - x).abs() <= bound * 1.0001).all().item<bool>()) << "cols " << cols;
    // Each row's largest magnitude becomes E4M3's largest finite value exactly...
    auto row_max = std::get<0>(q.values.to(torch::kFloat32).abs().max(1));
    EXPECT_EQ(row_max[0].item<float>(), kFp8Max);
    // ...and an all-zero row stays zeros with a finite scale.
    EXPECT_EQ(row_max[1].item<float>(), 0.f);
    EXPECT_TRUE(std::isfinite(q.scales[1].item<float>()));
  }
}

TEST(Fp8, ColumnScaleQuantizesTheScaledInput) {
  torch::manual_seed(1);
  auto x = sample(5, 48, torch::kFloat32), cs = torch::rand({48}) + 0.5;
  auto a = quantize_rows_fp8(x, cs), b = quantize_rows_fp8(x * cs.view({1, -1}));
  EXPECT_TRUE(torch::equal(a.values.view(torch::kUInt8), b.values.view(torch::kUInt8)));
  EXPECT_TRUE(torch::allclose(a.scales, b.scales));
  EXPECT_THROW(quantize_rows_fp8(x, torch::ones({47})), c10::Error);
}

TEST(Fp8, PartsAreQuantizedAsTheirConcatenation) {
  torch::manual_seed(5);
  const std::vector<torch::Tensor> parts{sample(6, 32, torch::kFloat32), torch::randn({6, 16}),
                                         torch::randn({6, 48}) * 10};
  const auto cs = torch::rand({96}) + 0.5;
  const auto a = quantize_rows_fp8(parts, cs), b = quantize_rows_fp8(torch::cat(parts, 1), cs);
  EXPECT_TRUE(torch::equal(a.values.view(torch::kUInt8), b.values.view(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(a.scales, b.scales));
  EXPECT_THROW(quantize_rows_fp8(parts, torch::ones({95})), c10::Error);
}

// Two weights' transposes side by side: the transpose of the two stacked. `offset` columns are
// left before them (2: not a multiple of 4, so the CUDA tiles cannot take it: LibTorch's copy).
void expect_transposes_side_by_side(const torch::Device& device, int64_t offset = 0) {
  auto a = (torch::randn({48, 80}) * 100).to(torch::kFloat8_e4m3fn).to(device);
  auto b = (torch::randn({32, 80}) * 100).to(torch::kFloat8_e4m3fn).to(device);
  auto out = torch::zeros({80, offset + 80}, a.options());
  transpose_fp8_into(a, out, offset);
  transpose_fp8_into(b, out, offset + 48);
  EXPECT_TRUE(torch::equal(out.narrow(1, offset, 80).cpu().view(torch::kUInt8),
                           torch::cat({a, b}, 0).t().contiguous().cpu().view(torch::kUInt8)))
      << device << " offset " << offset;
  EXPECT_THROW(transpose_fp8_into(a, out, offset + 40), c10::Error);  // past the last column
  auto bytes = torch::empty({80, offset + 80}, out.options().dtype(torch::kUInt8));
  EXPECT_THROW(transpose_fp8_into(a, bytes, 0), c10::Error);  // another one-byte dtype
}

TEST(Fp8, TransposesIntoColumnsSideBySide) { expect_transposes_side_by_side(torch::kCPU); }

TEST(Fp8, CpuProductIsTheDequantizedProduct) {
  torch::manual_seed(2);
  auto a = torch::randn({7, 64}), b = torch::randn({32, 64});
  auto got = fp8_mm(quantize_rows_fp8(a), quantize_rows_fp8(b), torch::kFloat32, false);
  auto exact = at::mm(a, b.t());
  // Two E4M3 roundings per term, errors independent across the sum: a few percent of the scale.
  EXPECT_LE(max_abs(got - exact) / max_abs(exact), 0.05);
  EXPECT_GT(max_abs(got - exact), 0.0);  // it did quantize
}

bool have_hopper() {
  return torch::cuda::is_available() && fp8_supported_on(torch::Device(torch::kCUDA, 0));
}

TEST(Fp8, CudaQuantizationMatchesCpuReference) {
  if (!have_hopper()) GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  torch::manual_seed(3);
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    // Rows kept in registers (1000, 2048, 4096, 6144, 16384: 1, 1, 2, 3 and 8 packs a thread in
    // bf16; in fp32 1, 2, 4 and 8 packs, 16384 read twice), read twice (20000), and without
    // 16-byte loads (37). 33 rows take a block each; 3001 are more than the GPU's blocks, which
    // then take several rows each, the last round ragged.
    for (int64_t rows : {33, 3001})
      for (int64_t cols : {1000, 2048, 4096, 6144, 16384, 20000, 37}) {
        if (rows > 33 && cols > 6144) continue;  // the loop over rows is the same for every width
        auto x = sample(rows, cols, dtype);
        auto cs = torch::rand({cols}) + 0.5;
        for (bool with_cs : {false, true}) {
          auto cpu = quantize_rows_fp8(x, with_cs ? cs : torch::Tensor());
          auto gpu = quantize_rows_fp8(x.cuda(), with_cs ? cs.cuda() : torch::Tensor());
          // The same IEEE float32 arithmetic and round-to-nearest-even: the same bytes.
          EXPECT_TRUE(
              torch::equal(gpu.values.cpu().view(torch::kUInt8), cpu.values.view(torch::kUInt8)))
              << rows << " rows, cols " << cols << " dtype " << dtype << " column scale "
              << with_cs;
          EXPECT_TRUE(torch::equal(gpu.scales.cpu(), cpu.scales));
        }
      }
  // Parts side by side (a group's output gradients), read where they are: kept in registers,
  // read twice, and (a part 36 wide, not a whole number of 16-byte packs) one value at a time.
  for (int64_t cols : {1024, 20000, 36}) {
    const std::vector<torch::Tensor> parts{sample(33, cols, torch::kBFloat16),
                                           sample(33, 256, torch::kBFloat16) * 3,
                                           sample(33, 256, torch::kBFloat16) / 3};
    auto cs = torch::rand({cols + 512}) + 0.5;
    auto cpu = quantize_rows_fp8(parts, cs);
    auto gpu = quantize_rows_fp8({parts[0].cuda(), parts[1].cuda(), parts[2].cuda()}, cs.cuda());
    EXPECT_TRUE(torch::equal(gpu.values.cpu().view(torch::kUInt8), cpu.values.view(torch::kUInt8)))
        << "parts, first " << cols << " wide";
    EXPECT_TRUE(torch::equal(gpu.scales.cpu(), cpu.scales));
  }
}

TEST(Fp8, CudaProductMatchesCpuReference) {
  if (!have_hopper()) GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  torch::manual_seed(4);
  auto a = quantize_rows_fp8(torch::randn({300, 512}).to(torch::kBFloat16));
  auto b = quantize_rows_fp8(torch::randn({256, 512}).to(torch::kBFloat16));
  auto cpu = fp8_mm(a, b, torch::kFloat32, false);
  for (bool fast : {false, true}) {
    auto gpu = fp8_mm({a.values.cuda(), a.scales.cuda()}, {b.values.cuda(), b.scales.cuda()},
                      torch::kBFloat16, fast);
    ASSERT_EQ(gpu.scalar_type(), torch::kBFloat16);
    // The products of E4M3 values are exact; what differs is the bf16 output's rounding (2^-8)
    // and, with fast accumulation, the tensor cores' own accumulator.
    EXPECT_LE(max_abs(gpu.cpu().to(torch::kFloat32) - cpu) / max_abs(cpu), fast ? 1e-2 : 8e-3)
        << "fast accumulation " << fast;
  }
}

TEST(Fp8, ProductIsAddedToOutWithOneRounding) {
  torch::manual_seed(6);
  const auto a = quantize_rows_fp8(sample(8, 64, torch::kFloat32));
  const auto b = quantize_rows_fp8(torch::randn({16, 64}));
  const auto out0 = torch::randn({8, 16}).to(torch::kBFloat16);
  auto out = out0.clone();
  fp8_mm_add_(out, a, b, /*fast_accumulate=*/false);
  const auto exact = out0.to(torch::kFloat32) + at::mm(dequantize_rows_fp8(a, torch::kFloat32),
                                                       dequantize_rows_fp8(b, torch::kFloat32).t());
  EXPECT_TRUE(torch::equal(out, exact.to(torch::kBFloat16)));
  auto wrong = torch::zeros({8, 15}, torch::kBFloat16);
  EXPECT_THROW(fp8_mm_add_(wrong, a, b, false), c10::Error);
}

TEST(Fp8, CudaProductAddedToOutMatchesCpuReference) {
  if (!have_hopper()) GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  torch::manual_seed(7);
  const auto a = quantize_rows_fp8(torch::randn({300, 512}).to(torch::kBFloat16));
  const auto b = quantize_rows_fp8(torch::randn({256, 512}).to(torch::kBFloat16));
  // An output of the product's own size, so that both halves of the sum matter.
  const auto out0 = (torch::randn({300, 256}) * 20).to(torch::kBFloat16);
  auto cpu = out0.clone();
  fp8_mm_add_(cpu, a, b, false);
  const double reference = max_abs(cpu.to(torch::kFloat32));
  for (bool fast : {false, true}) {
    auto gpu = out0.cuda();
    fp8_mm_add_(gpu, {a.values.cuda(), a.scales.cuda()}, {b.values.cuda(), b.scales.cuda()}, fast);
    // One bf16 rounding of the sum (2^-8) on both sides, and fast accumulation's own.
    EXPECT_LE(max_abs(gpu.cpu().to(torch::kFloat32) - cpu.to(torch::kFloat32)) / reference,
              fast ? 1e-2 : 8e-3)
        << "fast accumulation " << fast;
    // The same as the product then an addition (_scaled_mm has no C input), to bf16 precision.
    const auto separate = out0.cuda().to(torch::kFloat32) +
                          fp8_mm({a.values.cuda(), a.scales.cuda()},
                                 {b.values.cuda(), b.scales.cuda()}, torch::kBFloat16, fast)
                              .to(torch::kFloat32);
    EXPECT_LE(max_abs(gpu.to(torch::kFloat32) - separate) / reference, 8e-3);
  }
  // An output that starts 32 bytes past an alignment of 256 (a chunk of rows of a 48-wide matrix):
  // cuBLASLt is told the alignment it has.
  const auto narrow_b = quantize_rows_fp8(torch::randn({48, 512}).to(torch::kBFloat16));
  const auto whole = torch::randn({301, 48}).to(torch::kBFloat16);
  auto cpu_part = whole.narrow(0, 1, 300).clone();
  fp8_mm_add_(cpu_part, a, narrow_b, false);
  auto gpu_whole = whole.cuda();
  auto gpu_part = gpu_whole.narrow(0, 1, 300);
  fp8_mm_add_(gpu_part, {a.values.cuda(), a.scales.cuda()},
              {narrow_b.values.cuda(), narrow_b.scales.cuda()}, false);
  EXPECT_LE(max_abs(gpu_part.cpu().to(torch::kFloat32) - cpu_part.to(torch::kFloat32)) /
                max_abs(cpu_part.to(torch::kFloat32)),
            8e-3);
  EXPECT_TRUE(torch::equal(gpu_whole[0].cpu(), whole[0]));  // the row before is untouched
}

TEST(Fp8, TransposeMovesEveryByte) {
  auto values = (torch::randn({48, 80}) * 100).to(torch::kFloat8_e4m3fn);
  auto t = transpose_fp8(values);
  EXPECT_EQ(t.sizes(), (std::vector<int64_t>{80, 48}));
  EXPECT_TRUE(torch::equal(t.view(torch::kUInt8), values.t().contiguous().view(torch::kUInt8)));
}

TEST(Fp8, CudaTransposeMatchesCpu) {
  if (!have_hopper()) GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  // Whole tiles, partial tiles, and a width that is not a multiple of 4 (LibTorch's copy).
  for (auto shape : {std::vector<int64_t>{4096, 1024}, {200, 328}, {64, 30}}) {
    auto values = (torch::randn(shape) * 100).to(torch::kFloat8_e4m3fn);
    auto gpu = transpose_fp8(values.cuda()).cpu();
    EXPECT_TRUE(torch::equal(gpu.view(torch::kUInt8), transpose_fp8(values).view(torch::kUInt8)))
        << shape[0] << " x " << shape[1];
  }
  expect_transposes_side_by_side(torch::kCUDA);
  expect_transposes_side_by_side(torch::kCUDA, /*offset=*/2);
}

}  // namespace
}  // namespace kubetune::kernels
