// gpt-oss's attention with sinks: the fused GPU paths (flash attention for unpacked rows in bf16,
// with a window or without; memory-efficient attention for packed rows and fp32; each rescaled by
// the sink's share, backward through the kernel with the sink's log-sum-exp) against
// transformers' eager formula written out, forward and every gradient, grouped heads.
#include "trainer/model/sink_attention.h"

#include <torch/torch.h>

#include "test_util.h"

namespace kubetune::testing {
namespace {

struct Case {
  torch::Tensor q, k, v, sinks;
  model::SinkAttentionMask mask;
};

enum class Rows { kCausal, kWindow, kPacked };

// B=2, q with 4 heads and k, v with 2 (grouped), T=40 (not a multiple of the kernels' blocks),
// D=64; sinks large enough that their share matters. kWindow: a window of 8; kPacked: that
// window and the second row split into two segments.
Case make_case(torch::ScalarType dtype, Rows rows) {
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  Case c;
  c.q = torch::randn({2, 4, 40, 64}, opts), c.k = torch::randn({2, 2, 40, 64}, opts);
  c.v = torch::randn({2, 2, 40, 64}, opts);
  c.sinks = torch::randn({4}, opts.dtype(torch::kFloat)) * 2;
  if (rows == Rows::kCausal) return c;
  auto i = torch::arange(40, opts.dtype(torch::kLong));
  auto query = i.view({-1, 1}), key = i.view({1, -1});
  auto allowed =
      (key <= query).logical_and(key > query - 8).view({1, 1, 40, 40}).repeat({2, 1, 1, 1});
  if (rows == Rows::kPacked)
    allowed[1] = allowed[1].logical_and(((query < 25) == (key < 25)).view({1, 40, 40}));
  c.mask = {allowed, 8, rows == Rows::kPacked};
  return c;
}

// Forward and the gradients of q, k, v and the sinks of a weighted sum of the output.
std::vector<torch::Tensor> run(const Case& c, bool fused) {
  const double scale = 0.125;
  auto q = c.q.detach().requires_grad_(true), k = c.k.detach().requires_grad_(true),
       v = c.v.detach().requires_grad_(true), sinks = c.sinks.detach().requires_grad_(true);
  auto out =
      fused ? model::attention_with_sinks(q, k, v, c.mask, sinks, scale, 0, true)
            : model::attention_with_sinks_reference(q, k, v, c.mask.mask, sinks, scale, 0, true);
  torch::manual_seed(11);
  auto weight = torch::randn(out.sizes(), out.options().dtype(torch::kFloat));
  (out.to(torch::kFloat) * weight).sum().backward();
  return {out.detach().to(torch::kFloat), q.grad().to(torch::kFloat), k.grad().to(torch::kFloat),
          v.grad().to(torch::kFloat), sinks.grad().to(torch::kFloat)};
}

// In fp32 the fused path equals the eager formula to `tol`. In bf16 both are held to the fp32
// formula on the same (bf16-valued) inputs: the fused path within `tol`, and no further from it
// than the eager formula in bf16 is (the reference bf16 training would otherwise use).
void expect_fused_matches_reference(torch::ScalarType dtype, Rows rows, double tol) {
  const Case c = make_case(dtype, rows);
  const char* what = rows == Rows::kCausal   ? " (causal)"
                     : rows == Rows::kWindow ? " (window)"
                                             : " (packed)";
  Case exact = c;
  for (auto* t : {&exact.q, &exact.k, &exact.v}) *t = t->detach().to(torch::kFloat);
  const auto reference = run(exact, false), fused = run(c, true);
  const auto eager = dtype == torch::kFloat ? reference : run(c, false);
  const char* names[] = {"output", "dq", "dk", "dv", "dsinks"};
  for (size_t i = 0; i < reference.size(); ++i) {
    const double err = rel_err(fused[i], reference[i]);
    EXPECT_LT(err, tol) << names[i] << what;
    if (dtype != torch::kFloat) {
      EXPECT_LE(err, 1.5 * rel_err(eager[i], reference[i]) + 1e-3) << names[i] << what;
    }
  }
}

TEST(Cuda, SinkAttentionFusedMatchesTheEagerFormulaInFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  for (Rows rows : {Rows::kCausal, Rows::kWindow, Rows::kPacked})
    expect_fused_matches_reference(torch::kFloat, rows, 1e-4);
}

TEST(Cuda, SinkAttentionFusedMatchesTheEagerFormulaInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  for (Rows rows : {Rows::kCausal, Rows::kWindow, Rows::kPacked})
    expect_fused_matches_reference(torch::kBFloat16, rows, 3e-2);
}

}  // namespace
}  // namespace kubetune::testing
