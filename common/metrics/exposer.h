#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "common/metrics/registry.h"

namespace kubetune::metrics {

// A small HTTP server (cpprestsdk listener, its own thread pool) that answers
//   GET /metrics  with every added registry in the text format 0.0.4, and
//   GET <path>    for handlers added with add_handler() (e.g. /healthz, /readyz).
// Other paths get 404, other methods 405. It serves from construction until destruction.
class Exposer {
 public:
  // What an extra handler returns: HTTP status and a text/plain body.
  using Handler = std::function<std::pair<int, std::string>()>;

  // `address` is the interface to listen on ("0.0.0.0" in a pod, "127.0.0.1" in tests); port 0
  // lets the OS choose, see port(). Throws std::runtime_error when it cannot listen.
  Exposer(std::string address, int port);
  ~Exposer();
  Exposer(const Exposer&) = delete;
  Exposer& operator=(const Exposer&) = delete;

  // Registries are rendered in the order added; their metric names must not overlap.
  void add_registry(std::shared_ptr<Registry> registry);
  // `path` must start with '/' and must not be "/metrics". A handler that throws answers 500.
  void add_handler(const std::string& path, Handler handler);
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetune::metrics
