#include "trainer/data/sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace kubetune::data {
namespace {

// SplitMix64 finaliser: spreads (seed, epoch) over all 64 bits so nearby seeds and epochs give
// unrelated generator states.
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Uniform in [0, bound) without modulo bias, by rejecting the few draws below 2^64 mod bound.
uint64_t uniform_below(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = engine();
    if (r >= threshold) return r % bound;
  }
}

std::vector<size_t> permutation(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 engine(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = n; i > 1; --i) {  // Fisher-Yates, from the back
    const size_t j = static_cast<size_t>(uniform_below(engine, i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

[[noreturn]] void bad_batch_sizes(const std::string& why) {
  throw std::runtime_error("training.globalBatchSize: " + why);
}

}  // namespace

void check_batch_sizes(int64_t global_batch, int64_t micro_batch, int64_t accumulation,
                       int64_t world) {
  if (global_batch < 1 || micro_batch < 1 || accumulation < 1 || world < 1) {
    bad_batch_sizes("global batch, micro batch, accumulation and world size must be positive");
  }
  if (micro_batch * accumulation * world != global_batch) {
    bad_batch_sizes(std::to_string(global_batch) + " must equal microBatchSize (" +
                    std::to_string(micro_batch) + ") x gradientAccumulationSteps (" +
                    std::to_string(accumulation) + ") x world size (" + std::to_string(world) +
                    ")");
  }
}

DistributedSampler::DistributedSampler(size_t num_examples, size_t global_batch, int accumulation,
                                       int rank, int world, uint64_t seed, bool shuffle)
    : num_examples_(num_examples),
      global_batch_(global_batch),
      accumulation_(accumulation),
      rank_(rank),
      world_(world),
      seed_(seed),
      shuffle_(shuffle) {
  if (num_examples == 0) throw std::invalid_argument("DistributedSampler: empty dataset");
  if (world < 1 || rank < 0 || rank >= world) {
    throw std::invalid_argument("DistributedSampler: rank " + std::to_string(rank) +
                                " outside world of size " + std::to_string(world));
  }
  if (accumulation < 1) bad_batch_sizes("gradient accumulation steps must be positive");
  if (global_batch == 0 || global_batch % static_cast<size_t>(world) != 0) {
    bad_batch_sizes(std::to_string(global_batch) +
                    " must be a positive multiple of the world size " + std::to_string(world));
  }
  const size_t per_rank = global_batch / static_cast<size_t>(world);
  if (per_rank % static_cast<size_t>(accumulation) != 0) {
    bad_batch_sizes(std::to_string(global_batch) + " / world size " + std::to_string(world) +
                    " = " + std::to_string(per_rank) +
                    " examples per rank is not divisible by gradientAccumulationSteps " +
                    std::to_string(accumulation));
  }
  micro_batch_ = static_cast<int64_t>(per_rank / static_cast<size_t>(accumulation));
}

int64_t DistributedSampler::steps_per_epoch() const {
  return static_cast<int64_t>((num_examples_ + global_batch_ - 1) / global_batch_);
}

std::vector<size_t> DistributedSampler::epoch_order(int64_t epoch) const {
  if (epoch < 0) throw std::invalid_argument("DistributedSampler: negative epoch");
  if (!shuffle_) {
    std::vector<size_t> order(num_examples_);
    std::iota(order.begin(), order.end(), size_t{0});
    return order;
  }
  return permutation(num_examples_, seed_, epoch);
}

std::vector<size_t> DistributedSampler::global_batch_indices(int64_t epoch,
                                                             int64_t step_in_epoch) const {
  if (step_in_epoch < 0 || step_in_epoch >= steps_per_epoch()) {
    throw std::out_of_range("DistributedSampler: step " + std::to_string(step_in_epoch) +
                            " outside an epoch of " + std::to_string(steps_per_epoch()) + " steps");
  }
  const size_t begin = static_cast<size_t>(step_in_epoch) * global_batch_;
  const size_t end = std::min(begin + global_batch_, num_examples_);
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->epoch != epoch) {
    cache_->order = epoch_order(epoch);
    cache_->epoch = epoch;
  }
  return std::vector<size_t>(cache_->order.begin() + static_cast<std::ptrdiff_t>(begin),
                             cache_->order.begin() + static_cast<std::ptrdiff_t>(end));
}

std::vector<std::vector<size_t>> DistributedSampler::micro_batches(int64_t epoch,
                                                                   int64_t step_in_epoch) const {
  const std::vector<size_t> global = global_batch_indices(epoch, step_in_epoch);
  std::vector<size_t> share;  // this rank's examples: positions rank, rank + world, ...
  for (size_t j = static_cast<size_t>(rank_); j < global.size(); j += static_cast<size_t>(world_)) {
    share.push_back(global[j]);
  }
  std::vector<std::vector<size_t>> micro(static_cast<size_t>(accumulation_));
  for (size_t k = 0; k < share.size(); ++k) {
    micro[k / static_cast<size_t>(micro_batch_)].push_back(share[k]);
  }
  return micro;
}

}  // namespace kubetune::data
