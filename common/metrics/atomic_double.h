#pragma once

#include <atomic>

namespace kubetune::metrics::detail {

// std::atomic<double>::fetch_add only arrives in C++20; a compare-exchange loop gives the same
// lock-free add in C++17.
inline void atomic_add(std::atomic<double>& target, double delta) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

}  // namespace kubetune::metrics::detail
