// gpt-oss's attention with sinks: the fused GPU path (memory-efficient attention rescaled by the
// sink's share, backward through the kernel with the sink's log-sum-exp) against transformers'
// eager formula written out, forward and every gradient, with and without a mask.
#include "trainer/model/sink_attention.h"

#include <torch/torch.h>

#include "test_util.h"

namespace kubetune::testing {
namespace {

struct Case {
  torch::Tensor q, k, v, sinks, mask;
};

// B=2, H=4, T=40 (not a multiple of the kernel's blocks), D=64; sinks large enough that their
// share matters; with `masked`, a window of 8 and the second row split into two segments.
Case make_case(torch::ScalarType dtype, bool masked) {
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  Case c;
  c.q = torch::randn({2, 4, 40, 64}, opts), c.k = torch::randn({2, 4, 40, 64}, opts);
  c.v = torch::randn({2, 4, 40, 64}, opts);
  c.sinks = torch::randn({4}, opts.dtype(torch::kFloat)) * 2;
  if (masked) {
    auto i = torch::arange(40, opts.dtype(torch::kLong));
    auto query = i.view({-1, 1}), key = i.view({1, -1});
    auto allowed =
        (key <= query).logical_and(key > query - 8).view({1, 1, 40, 40}).repeat({2, 1, 1, 1});
    allowed[1] = allowed[1].logical_and(((query < 25) == (key < 25)).view({1, 40, 40}));
    c.mask = allowed;
  }
  for (auto* t : {&c.q, &c.k, &c.v, &c.sinks}) t->requires_grad_(true);
  return c;
}

void expect_fused_matches_reference(torch::ScalarType dtype, bool masked, double tol) {
  Case c = make_case(dtype, masked);
  const double scale = 0.125;
  auto run = [&](bool fused) {
    for (auto* t : {&c.q, &c.k, &c.v, &c.sinks}) t->mutable_grad() = torch::Tensor();
    auto out = fused ? model::attention_with_sinks(c.q, c.k, c.v, c.mask, c.sinks, scale, 0, true)
                     : model::attention_with_sinks_reference(c.q, c.k, c.v, c.mask, c.sinks, scale,
                                                             0, true);
    torch::manual_seed(11);
    auto weight = torch::randn(out.sizes(), out.options());
    (out.to(torch::kFloat) * weight.to(torch::kFloat)).sum().backward();
    return std::vector<torch::Tensor>{out.detach().clone(), c.q.grad().clone(), c.k.grad().clone(),
                                      c.v.grad().clone(), c.sinks.grad().clone()};
  };
  const auto reference = run(false), fused = run(true);
  const char* names[] = {"output", "dq", "dk", "dv", "dsinks"};
  for (size_t i = 0; i < reference.size(); ++i)
    EXPECT_LT(rel_err(fused[i], reference[i]), tol)
        << names[i] << (masked ? " (masked)" : " (causal)");
}

TEST(Cuda, SinkAttentionFusedMatchesTheEagerFormulaInFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  expect_fused_matches_reference(torch::kFloat, false, 1e-4);
  expect_fused_matches_reference(torch::kFloat, true, 1e-4);
}

TEST(Cuda, SinkAttentionFusedMatchesTheEagerFormulaInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  expect_fused_matches_reference(torch::kBFloat16, false, 2e-2);
  expect_fused_matches_reference(torch::kBFloat16, true, 2e-2);
}

}  // namespace
}  // namespace kubetune::testing
