#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace kubetune::metrics {

// Counts observations into buckets with inclusive upper bounds ("le"), plus their sum and count.
// A mutex (rather than one atomic per bucket) keeps each snapshot self-consistent: the +Inf bucket
// always equals _count, which histogram_quantile() relies on. Observations are per training step or
// per reconcile, so the lock is never hot.
class Histogram {
 public:
  struct Snapshot {
    std::vector<double> upper_bounds;       // finite bounds, ascending; +Inf is implicit
    std::vector<std::uint64_t> cumulative;  // one per bound, then one for +Inf (== count)
    double sum = 0;
    std::uint64_t count = 0;
  };

  // `upper_bounds` must be strictly increasing and free of NaN; a trailing +Inf is accepted and
  // dropped because the +Inf bucket always exists. Throws std::invalid_argument otherwise.
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void observe(double v);
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

  // The validation used by the constructor, exposed so a Registry can reject bad buckets at
  // registration time instead of at the first with().
  static std::vector<double> checked_bounds(std::vector<double> upper_bounds);

 private:
  const std::vector<double> upper_bounds_;
  mutable std::mutex mutex_;
  std::vector<std::uint64_t> counts_;  // non-cumulative; last slot is the +Inf overflow bucket
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

}  // namespace kubetune::metrics
