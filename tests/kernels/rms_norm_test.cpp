// The frozen-weight RMSNorm op against LibTorch's own at::rms_norm (values, and x's gradient
// through autograd), on the CPU here and on CUDA against the CPU where a GPU is present.
#include "kernels/rms_norm.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace kubetune::kernels {
namespace {

struct Result {
  torch::Tensor y, dx;
};

// ours: the op; else LibTorch's at::rms_norm, in float64 on the CPU.
Result run(bool ours, const torch::Tensor& x0, const torch::Tensor& w, const torch::Tensor& dy,
           double eps) {
  auto x = (ours ? x0 : x0.cpu().to(torch::kFloat64)).detach().clone().requires_grad_(true);
  torch::Tensor y = ours ? rms_norm_frozen(x, w, eps)
                         : at::rms_norm(x, {x.size(-1)}, w.cpu().to(torch::kFloat64), eps);
  y.backward(ours ? dy : dy.cpu().to(torch::kFloat64));
  return {y.detach().cpu().to(torch::kFloat64), x.grad().cpu().to(torch::kFloat64)};
}

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / (b.abs().max() + 1e-12)).item<double>();
}

void check(torch::Device device, torch::ScalarType dtype, double tol) {
  torch::manual_seed(0);
  // A head's 128 values (q/k norms), a hidden width, and a narrow row of 16 bytes in bf16.
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{3, 7, 4, 128}, {2, 5, 4096}, {9, 8}}) {
    if (dtype == torch::kFloat32 && shape.back() % 4 != 0) continue;
    const auto x = (torch::randn(shape) * 3).to(dtype).to(device);
    const auto w = (torch::rand({shape.back()}) + 0.5).to(dtype).to(device);
    const auto dy = torch::randn(shape).to(dtype).to(device);
    ASSERT_TRUE(rms_norm_frozen_supported(x, w));
    const Result ours = run(true, x, w, dy, 1e-6), reference = run(false, x, w, dy, 1e-6);
    const std::string what = std::to_string(shape.back()) + " wide";
    EXPECT_LE(max_relative(ours.y, reference.y), tol) << what << ": output";
    EXPECT_LE(max_relative(ours.dx, reference.dx), tol) << what << ": input gradient";
  }
}

TEST(RmsNorm, EqualsLibTorchRmsNormOnCpu) {
  check(torch::kCPU, torch::kFloat32, 1e-6);
  check(torch::kCPU, torch::kBFloat16, 1e-2);  // one bf16 rounding of each output
}

TEST(RmsNorm, CudaEqualsLibTorchRmsNorm) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  check(torch::kCUDA, torch::kFloat32, 1e-5);  // rsqrtf and the warp's order of sums
  check(torch::kCUDA, torch::kBFloat16, 1e-2);
}

TEST(RmsNorm, TakesOnlyAFrozenWeightOfWholeVectors) {
  const auto x = torch::randn({2, 8});
  EXPECT_TRUE(rms_norm_frozen_supported(x, torch::ones({8})));
  EXPECT_FALSE(rms_norm_frozen_supported(x, torch::ones({8}).requires_grad_(true)));
  EXPECT_FALSE(rms_norm_frozen_supported(x, torch::ones({8}, torch::kBFloat16)));
  EXPECT_FALSE(rms_norm_frozen_supported(torch::randn({2, 6}), torch::ones({6})));
  EXPECT_THROW(rms_norm_frozen(torch::randn({2, 6}), torch::ones({6}), 1e-6), c10::Error);
}

}  // namespace
}  // namespace kubetune::kernels
