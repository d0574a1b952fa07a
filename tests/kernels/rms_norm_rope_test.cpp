// The fused per-head RMSNorm + RoPE op against its unfused formula (LibTorch's RMSNorm arithmetic,
// then transformers' RoPE): values and the gradients of x and the weight, on CPU here and on CUDA
// where a GPU is present (skipped, visibly, where not), where the kernel is also held to the
// unfused GPU path the model ran before (LibTorch's fused RMSNorm, then our RoPE kernel).
#include "kernels/rms_norm_rope.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "kernels/rope.h"
#include "tests/kernels/rotation_tables.h"

namespace kubetune::kernels {
namespace {

constexpr double kEps = 1e-6;

struct Inputs {
  torch::Tensor wide, weight, cos, sin, dy;  // x is columns [D, D + H * D) of wide
  int64_t heads, head_dim;
};

Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t D) {
  torch::manual_seed(0);
  auto [cos, sin] = rotation_tables(B, T, D, 1e6);
  // Head rows of different scales, as projections give them; a weight around 1.
  auto wide = torch::randn({B, T, (H + 2) * D}) * (1 + 3 * torch::rand({B, T, 1}));
  return {wide, 1 + 0.3 * torch::randn({D}), cos, sin, torch::randn({B, T, H, D}), H, D};
}

enum class Path { kFused, kReference, kUnfusedGpu };

struct Result {
  torch::Tensor out, dx, dweight;
};

// x as a view of the wide product's columns (read in place by the kernel) or a contiguous copy.
// A frozen weight (LoRA's case) has no gradient: dweight stays undefined.
Result run(Path path, const Inputs& in, torch::Dtype dtype, torch::Dtype cs_dtype,
           torch::Device device, bool strided = true, bool weight_trains = true) {
  auto wide = in.wide.to(device, dtype).detach().requires_grad_(true);
  auto x =
      wide.narrow(-1, in.head_dim, in.heads * in.head_dim).unflatten(-1, {in.heads, in.head_dim});
  if (!strided) x = x.contiguous();
  auto weight = in.weight.to(device, dtype).detach().requires_grad_(weight_trains);
  auto cos = in.cos.to(device, cs_dtype), sin = in.sin.to(device, cs_dtype);
  torch::Tensor out;
  if (path == Path::kFused) out = rms_norm_rope(x, weight, cos, sin, kEps);
  if (path == Path::kReference) out = rms_norm_rope_reference(x, weight, cos, sin, kEps);
  if (path == Path::kUnfusedGpu)
    out = rope(std::get<0>(at::_fused_rms_norm(x, {in.head_dim}, weight, kEps)).contiguous(), cos,
               sin);
  out.backward(in.dy.to(device, out.scalar_type()));
  auto dx = wide.grad().narrow(-1, in.head_dim, in.heads * in.head_dim);
  return {out.detach(), dx.unflatten(-1, {in.heads, in.head_dim}), weight.grad()};
}

// Largest difference relative to the larger magnitude of b.
double relative_diff(const torch::Tensor& a, const torch::Tensor& b) {
  auto fa = a.to(torch::kFloat32).cpu(), fb = b.to(torch::kFloat32).cpu();
  return ((fa - fb).abs().max() / fb.abs().max()).item<double>();
}

TEST(RmsNormRope, CpuMatchesUnfusedFormulaInFp32) {
  for (int64_t D : {64, 8}) {
    auto in = make_inputs(2, 5, 3, D);
    for (bool strided : {true, false}) {
      auto fused = run(Path::kFused, in, torch::kFloat32, torch::kFloat32, torch::kCPU, strided);
      auto ref = run(Path::kReference, in, torch::kFloat32, torch::kFloat32, torch::kCPU, strided);
      EXPECT_LE(relative_diff(fused.out, ref.out), 1e-5) << "forward, head_dim " << D;
      EXPECT_LE(relative_diff(fused.dx, ref.dx), 1e-5) << "x gradient, head_dim " << D;
      EXPECT_LE(relative_diff(fused.dweight, ref.dweight), 1e-5) << "weight gradient, " << D;
      auto frozen = run(Path::kFused, in, torch::kFloat32, torch::kFloat32, torch::kCPU, strided,
                        /*weight_trains=*/false);
      EXPECT_FALSE(frozen.dweight.defined());
      EXPECT_TRUE(frozen.dx.equal(fused.dx)) << "x gradient with a frozen weight, " << D;
    }
  }
}

TEST(RmsNormRope, RejectsMismatchedShapes) {
  auto x = torch::zeros({2, 5, 3, 8});
  EXPECT_THROW(
      rms_norm_rope(x, torch::ones({6}), torch::zeros({2, 5, 8}), torch::zeros({2, 5, 8}), kEps),
      c10::Error);
  EXPECT_THROW(
      rms_norm_rope(x, torch::ones({8}), torch::zeros({2, 5, 6}), torch::zeros({2, 5, 6}), kEps),
      c10::Error);
  EXPECT_FALSE(rms_norm_rope_fits(96));
  EXPECT_TRUE(rms_norm_rope_fits(128));
}

TEST(RmsNormRope, CudaKernelMatchesCpuAndTheUnfusedGpuPath) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  struct Case {
    int64_t D;
    torch::Dtype x, cs;
    bool strided;
  };
  // Qwen3 (128), Gemma 3 (256) and 64; bf16 heads with fp32 cos/sin (a model kept in fp32 under
  // autocast); in place in a wider product and contiguous.
  for (auto c : {Case{128, torch::kBFloat16, torch::kBFloat16, true},
                 Case{128, torch::kBFloat16, torch::kBFloat16, false},
                 Case{256, torch::kBFloat16, torch::kBFloat16, true},
                 Case{64, torch::kBFloat16, torch::kFloat32, true},
                 Case{128, torch::kFloat32, torch::kFloat32, true}}) {
    auto in = make_inputs(2, 67, 5, c.D);
    auto gpu = run(Path::kFused, in, c.x, c.cs, torch::kCUDA, c.strided);
    auto cpu = run(Path::kFused, in, c.x, c.cs, torch::kCPU, c.strided);
    // bf16: one rounding apart where a value sits on a rounding boundary.
    const double tol = c.x == torch::kFloat32 ? 1e-5 : 1e-2;
    const std::string what = "head_dim " + std::to_string(c.D) + (c.strided ? " strided" : "");
    EXPECT_LE(relative_diff(gpu.out, cpu.out), tol) << "forward, " << what;
    EXPECT_LE(relative_diff(gpu.dx, cpu.dx), tol) << "x gradient, " << what;
    EXPECT_LE(relative_diff(gpu.dweight, cpu.dweight), tol) << "weight gradient, " << what;
    if (c.x != c.cs) continue;  // LibTorch's fused RMSNorm needs one dtype
    auto unfused = run(Path::kUnfusedGpu, in, c.x, c.cs, torch::kCUDA, c.strided);
    EXPECT_LE(relative_diff(gpu.out, unfused.out), tol) << "forward vs unfused, " << what;
    EXPECT_LE(relative_diff(gpu.dx, unfused.dx), tol) << "x gradient vs unfused, " << what;
    EXPECT_LE(relative_diff(gpu.dweight, unfused.dweight), tol)
        << "weight grad vs unfused, " << what;
    // With the weight frozen the kernel skips its gradient; x's is the same.
    auto frozen = run(Path::kFused, in, c.x, c.cs, torch::kCUDA, c.strided, false);
    EXPECT_FALSE(frozen.dweight.defined());
    EXPECT_TRUE(frozen.dx.equal(gpu.dx)) << "x gradient with a frozen weight, " << what;
  }
}

// Heads that a lane cannot read in place (one token at an odd offset, contiguous as it is) are
// copied to aligned memory first.
TEST(RmsNormRope, CudaKernelCopiesMisalignedHeads) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  auto in = make_inputs(1, 1, 4, 128);
  auto flat = torch::randn({1 + 4 * 128}).to(torch::kCUDA, torch::kBFloat16);
  auto x = flat.narrow(0, 1, 4 * 128).view({1, 1, 4, 128});
  ASSERT_TRUE(x.is_contiguous());
  auto weight = in.weight.to(torch::kCUDA, torch::kBFloat16);
  auto cos = in.cos.to(torch::kCUDA, torch::kBFloat16),
       sin = in.sin.to(torch::kCUDA, torch::kBFloat16);
  auto gpu = rms_norm_rope(x, weight, cos, sin, kEps);
  auto cpu = rms_norm_rope(x.cpu(), weight.cpu(), cos.cpu(), sin.cpu(), kEps);
  EXPECT_LE(relative_diff(gpu, cpu), 1e-2);
}

}  // namespace
}  // namespace kubetune::kernels
