#include "watch_queue.h"

#include <algorithm>

namespace kubetune::kubefake {

void WatchQueue::push(std::string line, uint64_t rv) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    lines_.push_back(std::move(line));
    progress_rv_ = std::max(progress_rv_, rv);
  }
  cv_.notify_all();
}

void WatchQueue::advance(uint64_t rv) {
  std::lock_guard<std::mutex> lock(mu_);
  progress_rv_ = std::max(progress_rv_, rv);
}

void WatchQueue::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool WatchQueue::closed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

WatchQueue::Batch WatchQueue::wait(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, until, [this] { return closed_ || !lines_.empty(); });
  Batch batch;
  batch.lines.assign(std::make_move_iterator(lines_.begin()),
                     std::make_move_iterator(lines_.end()));
  lines_.clear();
  batch.closed = closed_;
  batch.progress_rv = progress_rv_;
  return batch;
}

}  // namespace kubetune::kubefake
