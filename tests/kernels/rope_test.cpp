// The fused RoPE op against transformers' formula in LibTorch (rope_reference): values and the
// gradient, on CPU here and on CUDA where a GPU is present (skipped, visibly, where not).
#include "kernels/rope.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "tests/kernels/rotation_tables.h"

namespace kubetune::kernels {
namespace {

struct Result {
  torch::Tensor out, dx;
};

// x [B,T,H,D]; cos/sin as the model makes them: positions times frequencies, both halves equal.
struct Inputs {
  torch::Tensor x, cos, sin, dy;
};

Inputs make_inputs(int64_t B, int64_t T, int64_t H, int64_t D) {
  torch::manual_seed(0);
  auto [cos, sin] = rotation_tables(B, T, D, 10000.0);
  return {torch::randn({B, T, H, D}), cos, sin, torch::randn({B, T, H, D})};
}

Result run(bool fused, const Inputs& in, torch::Dtype x_dtype, torch::Dtype cs_dtype,
           torch::Device device) {
  auto x = in.x.to(device, x_dtype).detach().requires_grad_(true);
  auto cos = in.cos.to(device, cs_dtype), sin = in.sin.to(device, cs_dtype);
  auto out = fused ? rope(x, cos, sin) : rope_reference(x, cos, sin);
  out.backward(in.dy.to(device, out.scalar_type()));
  return {out.detach(), x.grad()};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32).cpu() - b.to(torch::kFloat32).cpu()).abs().max().item<double>();
}

TEST(Rope, CpuMatchesTransformersFormulaInFp32) {
  for (int64_t D : {64, 6}) {
    auto in = make_inputs(2, 5, 3, D);
    auto fused = run(true, in, torch::kFloat32, torch::kFloat32, torch::kCPU);
    auto ref = run(false, in, torch::kFloat32, torch::kFloat32, torch::kCPU);
    EXPECT_LE(max_diff(fused.out, ref.out), 1e-5) << "forward, head_dim " << D;
    EXPECT_LE(max_diff(fused.dx, ref.dx), 1e-5) << "gradient, head_dim " << D;
  }
}

TEST(Rope, RejectsMismatchedShapes) {
  EXPECT_THROW(rope(torch::zeros({2, 5, 3, 8}), torch::zeros({2, 5, 6}), torch::zeros({2, 5, 6})),
               c10::Error);
  EXPECT_THROW(rope(torch::zeros({2, 5, 3, 7}), torch::zeros({2, 5, 7}), torch::zeros({2, 5, 7})),
               c10::Error);
}

TEST(Rope, CudaKernelMatchesCpuReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  // head_dim 64 and 128 take the 16-byte path, 6 cannot; fp32 cos/sin with bf16 heads is what a
  // model kept in fp32 under autocast passes.
  struct Case {
    int64_t D;
    torch::Dtype x, cs;
  };
  for (auto c :
       {Case{64, torch::kFloat32, torch::kFloat32}, Case{128, torch::kBFloat16, torch::kBFloat16},
        Case{64, torch::kBFloat16, torch::kFloat32}, Case{6, torch::kBFloat16, torch::kBFloat16},
        Case{6, torch::kFloat32, torch::kFloat32}}) {
    auto in = make_inputs(2, 33, 4, c.D);
    auto gpu = run(true, in, c.x, c.cs, torch::kCUDA);
    auto cpu = run(true, in, c.x, c.cs, torch::kCPU);
    const double tol = c.x == torch::kFloat32 ? 1e-5 : 0.04;  // bf16: one rounding of |x| <~ 5
    EXPECT_LE(max_diff(gpu.out, cpu.out), tol) << "forward, head_dim " << c.D;
    EXPECT_LE(max_diff(gpu.dx, cpu.dx), tol) << "gradient, head_dim " << c.D;
    // And against transformers' own unfused formula at the same precision.
    auto ref = run(false, in, c.x, c.cs, torch::kCUDA);
    const double ref_tol = c.x == torch::kFloat32 ? 1e-5 : 0.08;  // it rounds three times
    EXPECT_LE(max_diff(gpu.out, ref.out), ref_tol) << "forward vs formula, head_dim " << c.D;
    EXPECT_LE(max_diff(gpu.dx, ref.dx), ref_tol) << "gradient vs formula, head_dim " << c.D;
  }
}

}  // namespace
}  // namespace kubetune::kernels
