#include "watch_stream.h"

#include <nlohmann/json.hpp>

namespace kubetune::kubefake {

WatchStream::WatchStream(std::shared_ptr<WatchQueue> queue, WatchSettings settings)
    : queue_(std::move(queue)), settings_(std::move(settings)) {}

WatchStream::~WatchStream() {
  queue_->close();
  if (thread_.joinable()) thread_.join();
}

void WatchStream::start() {
  thread_ = std::thread([this] { run(); });
}

bool WatchStream::write(const std::string& text) {
  try {
    buffer_.putn_nocopy(reinterpret_cast<const uint8_t*>(text.data()), text.size()).wait();
    // sync() makes the bytes visible to the listener's pending read right away; without it the
    // reader waits for a full block and events would arrive late.
    buffer_.sync().wait();
    return true;
  } catch (const std::exception&) {
    return false;  // the listener gave up on the body (client gone)
  }
}

void WatchStream::run() {
  using Clock = std::chrono::steady_clock;
  auto next_bookmark = Clock::now() + settings_.bookmark_interval;
  bool ok = true;
  while (ok) {
    Clock::time_point until = settings_.deadline.value_or(Clock::now() + std::chrono::hours(24));
    if (settings_.bookmarks) until = std::min(until, next_bookmark);
    WatchQueue::Batch batch = queue_->wait(until);
    for (const std::string& line : batch.lines) {
      if (!(ok = write(line))) break;
    }
    if (!ok || batch.closed) break;
    Clock::time_point now = Clock::now();
    if (settings_.deadline && now >= *settings_.deadline) break;
    if (settings_.bookmarks && now >= next_bookmark) {
      nlohmann::json bookmark = {
          {"type", "BOOKMARK"},
          {"object",
           {{"kind", settings_.kind},
            {"apiVersion", settings_.api_version},
            {"metadata", {{"resourceVersion", std::to_string(batch.progress_rv)}}}}}};
      ok = write(bookmark.dump() + "\n");
      next_bookmark = now + settings_.bookmark_interval;
    }
  }
  queue_->close();
  try {
    buffer_.close(std::ios_base::out).wait();
  } catch (const std::exception&) {
  }
  finished_ = true;
}

}  // namespace kubetune::kubefake
