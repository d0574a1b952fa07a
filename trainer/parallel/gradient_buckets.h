// Which trainable tensors share a gradient bucket, and which slice of a bucket each rank owns.
// The gradient synchronisation (communicator.h) and the sharded optimizer (optimizer_sharding.h)
// must agree on both, so both read them from here.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kubetune::parallel {

// Buckets of indices into `params`, in the order of `params`, which must be the order their
// gradients are expected to be ready in backward: a bucket is reduced once all of its gradients
// are ready, and buckets go in order. About `bucket_mb` each; the first is small (1 MB, as in
// torch DDP) so that communication starts early. A bucket's gradient buffer is its tensors'
// elements one after another, in the bucket's order.
using BucketPlan = std::vector<std::vector<size_t>>;
BucketPlan plan_gradient_buckets(const std::vector<torch::Tensor>& params, double bucket_mb);

// A bucket of `numel` elements is sharded when it splits into `world` equal slices.
inline bool splits_evenly(int64_t numel, int world) { return world > 1 && numel % world == 0; }

struct Slice {
  int64_t begin, size;
};
inline Slice shard_of(int64_t numel, int rank, int world) {
  const int64_t size = numel / world;
  return {size * rank, size};
}

}  // namespace kubetune::parallel
