#include "operator/kube/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace kubetune::op::kube {

RateLimiter::RateLimiter(double qps, int burst)
    : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_), last_(Clock::now()) {}

void RateLimiter::wait() {
  if (qps_ <= 0) return;
  Clock::duration delay{};
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto now = Clock::now();
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
    last_ = now;
    // Take the token now, even if it is not there yet: the debt is this request's wait, and the
    // requests after it queue behind it in order.
    tokens_ -= 1;
    if (tokens_ < 0)
      delay = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(-tokens_ / qps_));
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
}

}  // namespace kubetune::op::kube
