// gpt-oss's clamped SwiGLU op: on the CPU against autograd through transformers' formula written
// with LibTorch's ops (values and the gradient, on both sides of each clamp), and the CUDA kernel
// against the CPU op where a GPU is present (skipped, visibly, where not).
#include "kernels/clamped_swiglu.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

constexpr double kAlpha = 1.702, kLimit = 7.0;

// transformers' GptOssExperts._apply_gate.
torch::Tensor transformers_formula(const torch::Tensor& gate_up) {
  auto gate = gate_up.slice(-1, 0, gate_up.size(-1), 2);
  auto up = gate_up.slice(-1, 1, gate_up.size(-1), 2);
  gate = gate.clamp_max(kLimit);
  up = up.clamp(-kLimit, kLimit);
  return (up + 1) * (gate * torch::sigmoid(gate * kAlpha));
}

struct Result {
  torch::Tensor out, grad;
};

Result run(bool fused, const torch::Tensor& gate_up0, const torch::Tensor& dy) {
  auto gate_up = gate_up0.detach().clone().requires_grad_(true);
  auto out = fused ? clamped_swiglu(gate_up, kAlpha, kLimit) : transformers_formula(gate_up);
  out.backward(dy);
  return {out.detach(), gate_up.grad()};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64).cpu() - b.to(torch::kFloat64).cpu()).abs().max().item<double>();
}

// Values spread over [-12, 12] so that a good share of gates and ups lie past the limit.
torch::Tensor spread(std::vector<int64_t> shape) { return torch::randn(shape) * 6; }

TEST(ClampedSwiglu, CpuMatchesTransformersFormulaAndItsAutograd) {
  torch::manual_seed(0);
  const auto gate_up = spread({3, 5, 64}), dy = torch::randn({3, 5, 32});
  ASSERT_GT((gate_up.abs() > kLimit).sum().item<int64_t>(), 0);  // the clamps are exercised
  const Result fused = run(true, gate_up, dy), reference = run(false, gate_up, dy);
  EXPECT_LE(max_diff(fused.out, reference.out), 1e-6);
  EXPECT_LE(max_diff(fused.grad, reference.grad), 1e-5);
}

TEST(ClampedSwiglu, RejectsAnOddWidth) {
  EXPECT_THROW(clamped_swiglu(torch::randn({2, 5}), kAlpha, kLimit), c10::Error);
}

TEST(ClampedSwiglu, CudaKernelMatchesCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  torch::manual_seed(0);
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const auto gate_up = spread({4, 129, 2 * 360}).to(dtype);
    const auto dy = torch::randn({4, 129, 360}).to(dtype);
    const Result gpu = run(true, gate_up.cuda(), dy.cuda()), cpu = run(true, gate_up, dy);
    // Relative to the largest value: fp32, __expf against LibTorch's sigmoid; bf16, the kernel
    // rounds once where the CPU op rounds after each of its bf16 operations.
    const double tol = dtype == torch::kFloat32 ? 1e-6 : 2e-2;
    EXPECT_LE(max_diff(gpu.out, cpu.out), tol * cpu.out.abs().max().item<double>()) << "forward";
    EXPECT_LE(max_diff(gpu.grad, cpu.grad), tol * cpu.grad.abs().max().item<double>())
        << "backward";
  }
}

}  // namespace
}  // namespace kubetune::kernels
