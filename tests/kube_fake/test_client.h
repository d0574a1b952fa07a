#pragma once
// A real cpprestsdk HTTP client for the kube_fake tests, so each test goes over the wire exactly
// as the operator will: plain requests (TestClient) and watch streams read line by line as they
// arrive (WatchReader).
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

namespace kubetune::kubefake::testing {

struct Reply {
  int code = 0;
  nlohmann::json body;
};

class TestClient {
 public:
  explicit TestClient(const std::string& url, std::string token = "")
      : client_(url), token_(std::move(token)) {}

  Reply send(const std::string& method, const std::string& path,
             const nlohmann::json& body = nullptr,
             const std::string& content_type = "application/json") {
    web::http::http_request request(method);
    request.set_request_uri(path);
    if (!token_.empty()) request.headers().add("Authorization", "Bearer " + token_);
    if (!body.is_null()) request.set_body(body.dump(), content_type);
    web::http::http_response response = client_.request(request).get();
    std::string text = response.extract_string(true).get();
    Reply reply{response.status_code(), nullptr};
    if (!text.empty()) reply.body = nlohmann::json::parse(text);
    return reply;
  }
  Reply get(const std::string& path) { return send("GET", path); }
  Reply post(const std::string& path, const nlohmann::json& body) {
    return send("POST", path, body);
  }
  Reply put(const std::string& path, const nlohmann::json& body) { return send("PUT", path, body); }
  Reply del(const std::string& path) { return send("DELETE", path); }

 private:
  web::http::client::http_client client_;
  std::string token_;
};

// Opens a watch and collects its events on a background thread as they arrive.
class WatchReader {
 public:
  WatchReader(const std::string& url, const std::string& path_and_query) : client_(url) {
    web::http::http_response response =
        client_.request(web::http::methods::GET, path_and_query, cancel_.get_token()).get();
    status_code_ = response.status_code();
    body_ = response.body();
    reader_ = std::thread([this] { read_lines(); });
  }
  ~WatchReader() {
    cancel_.cancel();
    reader_.join();
  }

  int status_code() const { return status_code_; }

  // The next event, or nullopt when none arrives within `timeout` or the stream ended.
  std::optional<nlohmann::json> next(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [this] { return !events_.empty() || ended_; });
    if (events_.empty()) return std::nullopt;
    nlohmann::json event = events_.front();
    events_.pop_front();
    return event;
  }
  // The next event that is not a BOOKMARK.
  std::optional<nlohmann::json> next_change(
      std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      std::optional<nlohmann::json> event = next(left);
      if (!event || (*event)["type"] != "BOOKMARK") return event;
    }
  }
  // Waits until the server ends the stream; false if it is still open after `timeout`.
  bool wait_ended(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [this] { return ended_; });
  }

 private:
  void read_lines() {
    try {
      while (true) {
        concurrency::streams::container_buffer<std::string> line;
        size_t count = body_.read_line(line).get();
        if (count == 0 && body_.is_eof()) break;
        if (line.collection().empty()) continue;
        std::lock_guard<std::mutex> lock(mu_);
        events_.push_back(nlohmann::json::parse(line.collection()));
        cv_.notify_all();
      }
    } catch (const std::exception&) {
      // Cancelled or connection error: the stream is over either way.
    }
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  web::http::client::http_client client_;
  pplx::cancellation_token_source cancel_;
  int status_code_ = 0;
  concurrency::streams::istream body_;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> events_;
  bool ended_ = false;
};

}  // namespace kubetune::kubefake::testing
