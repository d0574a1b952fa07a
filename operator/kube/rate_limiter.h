// The client side of the API server's protection, as client-go's token bucket
// (flowcontrol.NewTokenBucketRateLimiter): requests go out at `qps` on average, `burst` at once
// after a quiet spell, and wait for their turn otherwise. The operator's --kube-api-qps and
// --kube-api-burst set them; a qps of 0 sends every request at once (the server's API Priority
// and Fairness then does all the limiting).
#pragma once

#include <chrono>
#include <mutex>

namespace kubetune::op::kube {

class RateLimiter {
 public:
  RateLimiter(double qps, int burst);
  // Blocks until this request may go.
  void wait();

 private:
  using Clock = std::chrono::steady_clock;
  double qps_;
  double burst_;
  double tokens_;
  Clock::time_point last_;
  std::mutex mutex_;
};

}  // namespace kubetune::op::kube
