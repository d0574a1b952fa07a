// A work queue of object keys ("ns/name") with client-go's guarantees: a key is queued at most
// once however often it is added, never handed to two workers at once (added while being
// processed, it is queued again when done()), and it can be delayed: add_after() for planned
// re-checks, add_rate_limited() for failures, with a per-key exponential back-off that forget()
// resets.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace kubetune::op {

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;

  explicit WorkQueue(std::chrono::milliseconds base_delay = std::chrono::milliseconds(5),
                     std::chrono::milliseconds max_delay = std::chrono::seconds(300));

  void add(const std::string& key);
  void add_after(const std::string& key, std::chrono::milliseconds delay);
  // Re-queues after base_delay * 2^(failures so far), capped at max_delay.
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int failures(const std::string& key) const;

  // Blocks until a key is ready; false once shut down.
  bool get(std::string& key);
  void done(const std::string& key);
  void shutdown();

  size_t depth() const;  // keys ready to be processed

 private:
  void add_locked(const std::string& key);
  void promote_ready_locked();

  const std::chrono::milliseconds base_delay_, max_delay_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;                       // queued or to be re-queued when done()
  std::set<std::string> processing_;                  // handed out, not yet done()
  std::map<std::string, Clock::time_point> waiting_;  // delayed keys, earliest time wins
  std::map<std::string, int> failures_;
  bool shutdown_ = false;
};

}  // namespace kubetune::op
