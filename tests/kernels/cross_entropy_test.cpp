// The fused cross-entropy halves against LibTorch's cross_entropy and its autograd: the loss
// sum(lse - picked) and the in-place gradient, on CPU here and on CUDA where a GPU is present
// (skipped, visibly, where not), for rows that take the 16-byte path and rows that cannot.
#include "kernels/cross_entropy.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

namespace F = torch::nn::functional;

struct Expected {
  double loss;
  torch::Tensor grad;  // of grad_scale * loss with respect to the logits, fp32
};

// LibTorch's own cross_entropy (reduction sum) and autograd, in fp32 on the CPU.
Expected reference(const torch::Tensor& logits, const torch::Tensor& targets, double grad_scale) {
  auto x = logits.detach().cpu().to(torch::kFloat32).requires_grad_(true);
  auto loss =
      F::cross_entropy(x, targets.cpu(), F::CrossEntropyFuncOptions().reduction(torch::kSum));
  (loss * grad_scale).backward();
  return {loss.item<double>(), x.grad()};
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.cpu().to(torch::kFloat32) - b.cpu().to(torch::kFloat32)).abs().max().item<double>();
}

void check(const torch::Tensor& logits, const torch::Tensor& targets, double loss_tol,
           double grad_tol) {
  const double g = 0.37;
  auto expected = reference(logits, targets, g);
  auto [lse, picked] = logsumexp_target(logits, targets);
  EXPECT_EQ(lse.scalar_type(), torch::kFloat32);
  EXPECT_NEAR((lse - picked).sum().item<double>(), expected.loss, loss_tol * expected.loss);

  torch::Tensor grad = logits.clone();
  cross_entropy_backward_(grad, lse, targets,
                          torch::full({}, g, logits.options().dtype(torch::kFloat32)));
  EXPECT_EQ(grad.scalar_type(), logits.scalar_type());
  EXPECT_LE(max_abs_diff(grad, expected.grad), grad_tol);
}

torch::Tensor random_logits(int64_t rows, int64_t vocab) { return torch::randn({rows, vocab}) * 3; }

TEST(CrossEntropy, CpuMatchesLibTorch) {
  torch::manual_seed(0);
  auto targets = torch::randint(0, 37, {9}, torch::kInt64);
  check(random_logits(9, 37), targets, 1e-6, 1e-6);
}

TEST(CrossEntropy, RejectsMismatchedTargets) {
  EXPECT_THROW(logsumexp_target(torch::zeros({4, 10}), torch::zeros({3}, torch::kInt64)),
               c10::Error);
  EXPECT_THROW(logsumexp_target(torch::zeros({4, 10}), torch::zeros({4}, torch::kInt32)),
               c10::Error);
}

TEST(CrossEntropy, CudaKernelsMatchLibTorch) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  torch::manual_seed(0);
  // 50000 columns take the 16-byte path for both dtypes; 50001 cannot.
  for (int64_t vocab : {50000, 50001}) {
    auto targets = torch::randint(0, vocab, {67}, torch::kInt64);
    auto logits = random_logits(67, vocab);
    check(logits.cuda(), targets.cuda(), 1e-5, 1e-6);
    // bf16 logits: the reference sees the same rounded values; the gradient is rounded once.
    auto rounded = logits.to(torch::kBFloat16);
    check(rounded.cuda(), targets.cuda(), 1e-5, 4e-3 * 0.37);
  }
}

}  // namespace
}  // namespace kubetune::kernels
