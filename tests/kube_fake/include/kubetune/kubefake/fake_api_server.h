#pragma once
// An in-process test double of the Kubernetes API server: real HTTP on 127.0.0.1, real watch
// streams, real resourceVersion / conflict / status-subresource / garbage-collection semantics,
// kept in memory. README.md next to this library lists what is kept and what is simplified.
#include <chrono>
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "kubetune/kubefake/resource_info.h"

namespace kubetune::kubefake {

// What a direct call() answers: the HTTP status code and the JSON body (an object, a list or a
// Status). Watches cannot be started through call().
struct FakeResponse {
  int code = 0;
  nlohmann::json body;
};

class FakeApiServer {
 public:
  // port 0 picks a free port. Throws std::runtime_error when the port cannot be opened.
  explicit FakeApiServer(int port = 0);
  // Ends every watch stream, then stops listening.
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string url() const;  // "http://127.0.0.1:PORT"
  int port() const;

  // ---- Test hooks; all thread-safe. ----
  // Keep only the last n events: a watch (or an Exact list) from an older resourceVersion gets 410.
  void set_watch_history_limit(size_t n);
  // Drop all history: any watch from a resourceVersion older than the current one gets 410.
  void compact_now();
  // Close every open watch stream, as a dropped connection would.
  void drop_watches();
  // How often watches that asked for allowWatchBookmarks get a BOOKMARK (default 1 s).
  void set_bookmark_interval(std::chrono::milliseconds interval);
  // Serve a custom resource (creating a CustomResourceDefinition object does the same).
  void register_resource(ResourceInfo info);
  // GET through the same code as HTTP, without auth or counting: the object, list or Status.
  nlohmann::json get(const std::string& path);
  // Any non-watch request through the same code as HTTP (path may carry a ?query), without auth
  // or counting. Handy to play the kubelet, e.g. PATCH .../pods/p/status.
  FakeResponse call(const std::string& method, const std::string& path,
                    const nlohmann::json& body = nullptr,
                    const std::string& content_type = "application/json");
  // Requests received over HTTP whose method matches and whose path (no query) starts with prefix.
  size_t request_count(const std::string& method, const std::string& path_prefix) const;
  // When set, HTTP requests without "Authorization: Bearer <token>" get 401.
  void set_token(std::string bearer);
  // The next `times` HTTP requests matching method and path prefix fail with `code` (e.g. 500,
  // 429, 503) and a Status body, to exercise client retries.
  void inject_error(const std::string& method, const std::string& path_prefix, int code,
                    int times = 1);
  // Number of watch streams currently open.
  size_t open_watch_count() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetune::kubefake
