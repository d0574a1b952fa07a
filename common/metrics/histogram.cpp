#include "common/metrics/histogram.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kubetune::metrics {

std::vector<double> Histogram::checked_bounds(std::vector<double> bounds) {
  if (!bounds.empty() && std::isinf(bounds.back()) && bounds.back() > 0) bounds.pop_back();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (std::isnan(bounds[i])) {
      throw std::invalid_argument("histogram bucket " + std::to_string(i) + " is NaN");
    }
    if (i > 0 && !(bounds[i] > bounds[i - 1])) {
      throw std::invalid_argument("histogram buckets must be strictly increasing: bucket " +
                                  std::to_string(i) + " (" + std::to_string(bounds[i]) +
                                  ") <= bucket " + std::to_string(i - 1));
    }
  }
  return bounds;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(checked_bounds(std::move(upper_bounds))),
      counts_(upper_bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  // First bound >= v: buckets are "less or equal" (le). NaN lands in +Inf, like client_golang.
  const auto it = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v);
  const auto index = static_cast<std::size_t>(it - upper_bounds_.begin());
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[index];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snap;
  snap.upper_bounds = upper_bounds_;
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t running = 0;
  for (std::uint64_t c : counts_) {
    running += c;
    snap.cumulative.push_back(running);
  }
  snap.sum = sum_;
  snap.count = count_;
  return snap;
}

}  // namespace kubetune::metrics
