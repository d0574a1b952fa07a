#include "common/metrics/counter.h"

#include <stdexcept>
#include <string>

#include "common/metrics/atomic_double.h"

namespace kubetune::metrics {

void Counter::inc(double v) {
  // `!(v >= 0)` also catches NaN, which would poison the counter forever.
  if (!(v >= 0)) {
    throw std::invalid_argument("counter increment must be >= 0, got " + std::to_string(v));
  }
  detail::atomic_add(value_, v);
}

}  // namespace kubetune::metrics
