#pragma once

#include <atomic>

namespace kubetune::metrics {

// A monotonically increasing value (requests served, tokens trained). Lock-free and safe to update
// from any thread. Prometheus derives rates from counters, so they must never go down.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  // Throws std::invalid_argument for a negative or NaN increment.
  void inc(double v = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace kubetune::metrics
