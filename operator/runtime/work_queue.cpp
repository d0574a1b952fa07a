#include "operator/runtime/work_queue.h"

#include <algorithm>
#include <cmath>

namespace kubetune::op {

WorkQueue::WorkQueue(std::chrono::milliseconds base_delay, std::chrono::milliseconds max_delay)
    : base_delay_(base_delay), max_delay_(max_delay) {}

void WorkQueue::add(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  add_locked(key);
}

void WorkQueue::add_locked(const std::string& key) {
  if (shutdown_ || !dirty_.insert(key).second) return;
  if (processing_.count(key)) return;  // done() queues it again
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::add_after(const std::string& key, std::chrono::milliseconds delay) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (delay.count() <= 0) {
    add_locked(key);
    return;
  }
  const auto when = Clock::now() + delay;
  auto it = waiting_.find(key);
  if (it == waiting_.end() || when < it->second) waiting_[key] = when;
  cv_.notify_all();  // a sleeping get() may need to wake earlier
}

void WorkQueue::add_rate_limited(const std::string& key) {
  std::chrono::milliseconds delay;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const int n = failures_[key]++;
    const double factor = std::pow(2.0, std::min(n, 30));
    delay = std::chrono::milliseconds(
        static_cast<long long>(std::min<double>(base_delay_.count() * factor, max_delay_.count())));
  }
  add_after(key, delay);
}

void WorkQueue::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  failures_.erase(key);
}

int WorkQueue::failures(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::promote_ready_locked() {
  const auto now = Clock::now();
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->second <= now) {
      add_locked(it->first);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

bool WorkQueue::get(std::string& key) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    promote_ready_locked();
    if (shutdown_) return false;
    if (!queue_.empty()) break;
    if (waiting_.empty()) {
      cv_.wait(lock);
    } else {
      auto next = std::min_element(waiting_.begin(), waiting_.end(), [](auto& a, auto& b) {
                    return a.second < b.second;
                  })->second;
      cv_.wait_until(lock, next);
    }
  }
  key = queue_.front();
  queue_.pop_front();
  processing_.insert(key);
  dirty_.erase(key);
  return true;
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  processing_.erase(key);
  if (dirty_.count(key) && !shutdown_) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

void WorkQueue::shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  shutdown_ = true;
  cv_.notify_all();
}

size_t WorkQueue::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

}  // namespace kubetune::op
