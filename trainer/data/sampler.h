#pragma once
// Deterministic distributed sampler: which examples every rank trains on at every step.
//
// Epoch e visits the examples in a permutation seeded by (seed, e), built with std::mt19937_64
// (whose output the C++ standard fixes) and our own Fisher-Yates with unbiased bounded draws
// (std::shuffle and std::uniform_int_distribution are implementation-defined), so the order is the
// same on every platform and standard library. With shuffle=false the order is the identity.
//
// One optimizer step consumes one global batch of `global_batch` consecutive examples of that
// order; the last step of an epoch may be smaller (ceil division), and every rank does the same
// number of steps. Within a global batch, example j goes to rank j % world; a rank's share is cut
// into `accumulation` micro-batches of at most micro_batch_size() examples, some possibly empty on
// a short last step (the training loop still runs its collectives for them).
//
// The position in training is (epoch, step_in_epoch) and the global batch depends only on it, the
// seed and the global batch size, not on the world size: a run can resume on another number of
// GPUs and see the same data.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace kubetune::data {

// Throws std::runtime_error naming training.globalBatchSize unless
// micro_batch * accumulation * world == global_batch (all positive).
void check_batch_sizes(int64_t global_batch, int64_t micro_batch, int64_t accumulation,
                       int64_t world);

class DistributedSampler {
 public:
  // Throws std::runtime_error (naming training.globalBatchSize) unless global_batch is a positive
  // multiple of world * accumulation, and std::invalid_argument for an empty dataset, world < 1 or
  // rank outside [0, world).
  DistributedSampler(size_t num_examples, size_t global_batch, int accumulation, int rank,
                     int world, uint64_t seed, bool shuffle);

  int64_t steps_per_epoch() const;
  int64_t micro_batch_size() const { return micro_batch_; }

  // `accumulation` lists of example indices for this rank at this step.
  std::vector<std::vector<size_t>> micro_batches(int64_t epoch, int64_t step_in_epoch) const;
  // The whole global batch (all ranks), in order.
  std::vector<size_t> global_batch_indices(int64_t epoch, int64_t step_in_epoch) const;
  // The full visiting order of an epoch (a permutation of 0..num_examples-1).
  std::vector<size_t> epoch_order(int64_t epoch) const;

 private:
  size_t num_examples_;
  size_t global_batch_;
  int accumulation_;
  int rank_;
  int world_;
  uint64_t seed_;
  bool shuffle_;
  int64_t micro_batch_;

  // micro_batches() is called once per step; rebuilding an O(N) permutation each time would be
  // wasteful, so the last epoch's order is cached. The cache is behind a pointer so the sampler
  // stays copyable and movable; a mutex keeps const calls thread-safe.
  struct OrderCache {
    std::mutex mutex;
    int64_t epoch = -1;
    std::vector<size_t> order;
  };
  std::shared_ptr<OrderCache> cache_ = std::make_shared<OrderCache>();
};

}  // namespace kubetune::data
