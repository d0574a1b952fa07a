#pragma once

#include <atomic>

#include "common/metrics/atomic_double.h"

namespace kubetune::metrics {

// A value that can go up and down (loss, memory in use, queue depth). Lock-free, any thread.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void inc(double v = 1) { detail::atomic_add(value_, v); }
  void dec(double v = 1) { detail::atomic_add(value_, -v); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

}  // namespace kubetune::metrics
