#pragma once
// The hand-off between the store (which produces watch events while holding its mutex) and a
// watch stream's writer thread (which sends them without holding it). The store only appends
// serialized lines here, so a slow client never blocks writers.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

namespace kubetune::kubefake {

class WatchQueue {
 public:
  struct Batch {
    std::vector<std::string> lines;  // newline-terminated JSON events, in order
    bool closed = false;             // no more lines will ever come
    uint64_t progress_rv = 0;        // every event up to this RV is in `lines` or was sent before
  };

  // Appends one event line; `rv` is the resourceVersion it was committed at.
  void push(std::string line, uint64_t rv);
  // Records that the store reached `rv` without an event for this watch (bookmarks use it).
  void advance(uint64_t rv);
  // Ends the stream once the queued lines are sent.
  void close();
  bool closed() const;
  // Waits until a line is queued, the queue is closed or `until` passes; takes the queued lines.
  Batch wait(std::chrono::steady_clock::time_point until);

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> lines_;
  uint64_t progress_rv_ = 0;
  bool closed_ = false;
};

}  // namespace kubetune::kubefake
