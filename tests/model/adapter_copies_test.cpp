// The adapters' per-forward copies in the products' dtype (trainer/model/adapter_copies.h): used
// while their weights are unchanged, never when a weight has changed since, and never rewritten
// under a graph that saved them.
#include "trainer/model/adapter_copies.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace kubetune::model {
namespace {

TEST(AdapterCopies, CopiesAreUsedWhileTheirWeightsAreUnchanged) {
  torch::manual_seed(0);
  auto a = torch::randn({4, 8}).requires_grad_(true), b = torch::randn({8, 4}).requires_grad_(true);
  ComputeCopy ca, cb;
  refresh_compute_copies({{&ca, a}, {&cb, b}}, torch::kBFloat16);
  const auto first = ca.of(a, torch::kBFloat16);
  EXPECT_EQ(first.scalar_type(), torch::kBFloat16);
  EXPECT_FALSE(first.requires_grad());
  EXPECT_TRUE(first.equal(a.detach().to(torch::kBFloat16)));
  EXPECT_TRUE(cb.of(b, torch::kBFloat16).equal(b.detach().to(torch::kBFloat16)));
  // The same copy on each use: the whole forward reads one.
  EXPECT_EQ(ca.of(a, torch::kBFloat16).data_ptr(), first.data_ptr());
  // Another dtype is a cast made there.
  EXPECT_NE(ca.of(a, torch::kFloat16).data_ptr(), first.data_ptr());
}

TEST(AdapterCopies, AWeightChangedSinceIsCastAgain) {
  auto a = torch::ones({4, 8}).requires_grad_(true);
  ComputeCopy ca;
  refresh_compute_copies({{&ca, a}}, torch::kBFloat16);
  {
    torch::NoGradGuard no_grad;
    a.add_(1);  // an optimizer step
  }
  EXPECT_TRUE(ca.of(a, torch::kBFloat16).equal(torch::full({4, 8}, 2.0, torch::kBFloat16)));
  // A weight whose storage was replaced (a gathered shard) is cast again too.
  a.set_data(torch::full({4, 8}, 3.0));
  EXPECT_TRUE(ca.of(a, torch::kBFloat16).equal(torch::full({4, 8}, 3.0, torch::kBFloat16)));
}

TEST(AdapterCopies, CopiesAreNotUsedInALaterForward) {
  auto a = torch::ones({4, 8}).requires_grad_(true);
  ComputeCopy ca;
  refresh_compute_copies({{&ca, a}}, torch::kBFloat16);
  const auto made = ca.of(a, torch::kBFloat16);
  // Written behind the version counter's back, as a gather into a flat buffer does.
  a.detach().view({-1}).data_ptr<float>()[0] = 7;
  EXPECT_EQ(ca.of(a, torch::kBFloat16).data_ptr(), made.data_ptr());  // within its forward
  forget_compute_copies();                                            // the next forward
  const auto cast = ca.of(a, torch::kBFloat16);
  EXPECT_NE(cast.data_ptr(), made.data_ptr());
  EXPECT_EQ(cast[0][0].item<float>(), 7);
}

TEST(AdapterCopies, ARefreshLeavesEarlierCopiesAsTheyWere) {
  auto a = torch::ones({4, 8}).requires_grad_(true);
  ComputeCopy ca;
  refresh_compute_copies({{&ca, a}}, torch::kBFloat16);
  const auto saved = ca.of(a, torch::kBFloat16);  // as a graph saves it
  const auto version = saved._version();
  {
    torch::NoGradGuard no_grad;
    a.mul_(5);
  }
  refresh_compute_copies({{&ca, a}}, torch::kBFloat16);
  EXPECT_EQ(saved._version(), version);
  EXPECT_TRUE(saved.equal(torch::ones({4, 8}, torch::kBFloat16)));
  EXPECT_TRUE(ca.of(a, torch::kBFloat16).equal(torch::full({4, 8}, 5.0, torch::kBFloat16)));
}

TEST(AdapterCopies, WeightsAlreadyInTheDtypeNeedNoCopy) {
  auto a = torch::ones({4, 8}, torch::kBFloat16).requires_grad_(true);
  ComputeCopy ca;
  refresh_compute_copies({{&ca, a}}, torch::kBFloat16);
  EXPECT_EQ(ca.of(a, torch::kBFloat16).data_ptr(), a.data_ptr());
}

}  // namespace
}  // namespace kubetune::model
