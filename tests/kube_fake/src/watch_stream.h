#pragma once
// One open watch response: a writer thread that moves event lines from a WatchQueue into a
// chunked HTTP body (a producer_consumer_buffer the listener reads from as data arrives), adds
// BOOKMARK events when asked, and ends the body at timeoutSeconds or when the queue closes.
#include <cpprest/producerconsumerstream.h>
#include <cpprest/streams.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "watch_queue.h"

namespace kubetune::kubefake {

struct WatchSettings {
  std::string kind;         // for BOOKMARK objects
  std::string api_version;  // for BOOKMARK objects
  bool bookmarks = false;   // allowWatchBookmarks=true
  std::chrono::milliseconds bookmark_interval{1000};
  std::optional<std::chrono::steady_clock::time_point> deadline;  // from timeoutSeconds
};

class WatchStream {
 public:
  WatchStream(std::shared_ptr<WatchQueue> queue, WatchSettings settings);
  ~WatchStream();  // closes the queue and waits for the writer thread
  WatchStream(const WatchStream&) = delete;
  WatchStream& operator=(const WatchStream&) = delete;

  concurrency::streams::istream body() const { return buffer_.create_istream(); }
  void start();
  void stop() { queue_->close(); }
  bool finished() const { return finished_; }

 private:
  void run();
  bool write(const std::string& text);

  std::shared_ptr<WatchQueue> queue_;
  WatchSettings settings_;
  concurrency::streams::producer_consumer_buffer<uint8_t> buffer_;
  std::thread thread_;
  std::atomic<bool> finished_{false};
};

}  // namespace kubetune::kubefake
