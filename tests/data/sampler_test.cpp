// DistributedSampler: portable permutations, disjoint covers, equal step counts, resumability.
#include "trainer/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <type_traits>

#include "fixtures.h"

namespace kubetune::data {
namespace {

struct Setup {
  size_t n, global_batch;
  int accumulation, world;
};

// Uneven sizes on purpose: short last steps, ranks with fewer examples, empty micro-batches.
const std::vector<Setup> kSetups = {
    {1, 1, 1, 1},  {10, 4, 1, 2}, {10, 4, 2, 2},  {17, 8, 2, 4},  {100, 12, 3, 2},
    {5, 16, 2, 4}, {37, 6, 1, 3}, {64, 64, 4, 8}, {65, 64, 4, 8}, {3, 8, 4, 2},
};

std::vector<size_t> sorted(std::vector<size_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<size_t> iota_to(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t{0});
  return v;
}

TEST(Sampler, MatchesPortableReferencePermutation) {
  const nlohmann::json refs = testing::read_fixture_json("sampler.json");
  ASSERT_GE(refs.size(), 10u);
  for (const auto& ref : refs) {
    const DistributedSampler sampler(ref.at("n").get<size_t>(), 1, 1, 0, 1,
                                     ref.at("seed").get<uint64_t>(), true);
    EXPECT_EQ(sampler.epoch_order(ref.at("epoch").get<int64_t>()),
              ref.at("order").get<std::vector<size_t>>())
        << "n=" << ref.at("n") << " seed=" << ref.at("seed") << " epoch=" << ref.at("epoch");
  }
}

TEST(Sampler, RanksCoverEachEpochDisjointly) {
  for (const auto& s : kSetups) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " global=" + std::to_string(s.global_batch) +
                 " world=" + std::to_string(s.world));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<size_t> seen;
      int64_t steps = -1;
      for (int rank = 0; rank < s.world; ++rank) {
        const DistributedSampler sampler(s.n, s.global_batch, s.accumulation, rank, s.world, 7,
                                         true);
        if (steps < 0) steps = sampler.steps_per_epoch();
        EXPECT_EQ(sampler.steps_per_epoch(), steps) << "every rank does the same number of steps";
        EXPECT_EQ(steps, static_cast<int64_t>((s.n + s.global_batch - 1) / s.global_batch));
        for (int64_t step = 0; step < steps; ++step) {
          const auto micro = sampler.micro_batches(epoch, step);
          ASSERT_EQ(micro.size(), static_cast<size_t>(s.accumulation));
          for (const auto& m : micro) {
            EXPECT_LE(static_cast<int64_t>(m.size()), sampler.micro_batch_size());
            seen.insert(seen.end(), m.begin(), m.end());
          }
        }
      }
      EXPECT_EQ(sorted(seen), iota_to(s.n)) << "each example exactly once per epoch";
    }
  }
}

TEST(Sampler, RanksTogetherFormTheGlobalBatch) {
  for (const auto& s : kSetups) {
    const DistributedSampler reference(s.n, s.global_batch, s.accumulation, 0, s.world, 3, true);
    for (int64_t step = 0; step < reference.steps_per_epoch(); ++step) {
      const std::vector<size_t> global = reference.global_batch_indices(1, step);
      EXPECT_EQ(global.size(),
                std::min(s.global_batch, s.n - static_cast<size_t>(step) * s.global_batch));
      std::vector<size_t> from_ranks;
      for (int rank = 0; rank < s.world; ++rank) {
        const DistributedSampler sampler(s.n, s.global_batch, s.accumulation, rank, s.world, 3,
                                         true);
        std::vector<size_t> mine;
        for (const auto& m : sampler.micro_batches(1, step))
          mine.insert(mine.end(), m.begin(), m.end());
        // Example j of the global batch belongs to rank j % world.
        for (size_t k = 0; k < mine.size(); ++k) {
          EXPECT_EQ(mine[k], global[static_cast<size_t>(rank) + k * static_cast<size_t>(s.world)]);
        }
        from_ranks.insert(from_ranks.end(), mine.begin(), mine.end());
      }
      EXPECT_EQ(sorted(from_ranks), sorted(global));
    }
  }
}

TEST(Sampler, GlobalBatchIndependentOfWorldSize) {
  // Resuming on another number of GPUs (accumulation adjusted) must see the same data per step.
  const size_t n = 50, global_batch = 8;
  const DistributedSampler one(n, global_batch, 8, 0, 1, 11, true);
  const DistributedSampler two(n, global_batch, 2, 1, 2, 11, true);
  const DistributedSampler eight(n, global_batch, 1, 5, 8, 11, true);
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t step = 0; step < one.steps_per_epoch(); ++step) {
      EXPECT_EQ(one.global_batch_indices(epoch, step), two.global_batch_indices(epoch, step));
      EXPECT_EQ(one.global_batch_indices(epoch, step), eight.global_batch_indices(epoch, step));
    }
  }
}

TEST(Sampler, DeterministicAndEpochsDiffer) {
  const DistributedSampler a(100, 10, 1, 0, 1, 42, true);
  const DistributedSampler b(100, 10, 1, 0, 1, 42, true);
  const DistributedSampler other_seed(100, 10, 1, 0, 1, 43, true);
  EXPECT_EQ(a.epoch_order(0), b.epoch_order(0));
  EXPECT_EQ(a.micro_batches(2, 3), b.micro_batches(2, 3));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  EXPECT_NE(a.epoch_order(0), other_seed.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), iota_to(100)) << "shuffled";
  EXPECT_EQ(sorted(a.epoch_order(3)), iota_to(100)) << "a permutation";
  // Interleaved epochs (the cache) give the same answers.
  const auto step_e0 = a.global_batch_indices(0, 4);
  a.global_batch_indices(1, 4);
  EXPECT_EQ(a.global_batch_indices(0, 4), step_e0);
  // The training loop keeps samplers in structs and reassigns them.
  static_assert(std::is_copy_assignable_v<DistributedSampler>);
  static_assert(std::is_move_assignable_v<DistributedSampler>);
  DistributedSampler copy = other_seed;
  copy = a;
  EXPECT_EQ(copy.global_batch_indices(0, 4), step_e0);
}

TEST(Sampler, NoShuffleIsIdentity) {
  const DistributedSampler sampler(10, 4, 1, 1, 2, 42, false);
  EXPECT_EQ(sampler.epoch_order(5), iota_to(10));
  EXPECT_EQ(sampler.global_batch_indices(0, 2), (std::vector<size_t>{8, 9}));
  EXPECT_EQ(sampler.micro_batches(0, 0), (std::vector<std::vector<size_t>>{{1, 3}}));
  EXPECT_EQ(sampler.micro_batches(0, 2), (std::vector<std::vector<size_t>>{{9}}));
}

void expect_batch_size_error(const std::function<void()>& f) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("training.globalBatchSize"), std::string::npos)
        << e.what();
  }
}

TEST(Sampler, ValidatesBatchSizes) {
  expect_batch_size_error([] { DistributedSampler(10, 6, 1, 0, 4, 0, true); });  // 6 % 4
  expect_batch_size_error([] { DistributedSampler(10, 8, 3, 0, 2, 0, true); });  // 4 % 3
  expect_batch_size_error([] { DistributedSampler(10, 0, 1, 0, 1, 0, true); });
  expect_batch_size_error([] { check_batch_sizes(16, 2, 2, 2); });
  EXPECT_NO_THROW(check_batch_sizes(16, 2, 2, 4));
  EXPECT_THROW(DistributedSampler(0, 1, 1, 0, 1, 0, true), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(10, 2, 1, 2, 2, 0, true), std::invalid_argument);
  const DistributedSampler ok(10, 8, 2, 0, 2, 0, true);
  EXPECT_EQ(ok.micro_batch_size(), 2);
  EXPECT_THROW(ok.micro_batches(0, 2), std::out_of_range);
}

}  // namespace
}  // namespace kubetune::data
