#include "trainer/parallel/gradient_buckets.h"

#include <algorithm>
#include <torch/csrc/distributed/c10d/reducer.hpp>

namespace kubetune::parallel {

BucketPlan plan_gradient_buckets(const std::vector<torch::Tensor>& params, double bucket_mb) {
  const auto cap = static_cast<size_t>(bucket_mb * 1024 * 1024);
  const size_t first_cap = std::min<size_t>(cap, 1024 * 1024);
  auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(params, {first_cap, cap});
  // c10d orders buckets by their smallest index, i.e. already in the order of `params`.
  return buckets;
}

}  // namespace kubetune::parallel
