// The HTTP side of a kubetune process, on cpprestsdk's listener:
//   GET /metrics  every added prometheus-cpp registry, in the text format 0.0.4
//                 (prometheus::TextSerializer), and
//   GET <path>    the handlers added with add_handler() (the operator's /healthz and /readyz).
// Other paths answer 404, other methods 405. It serves from construction until destruction.
//
// Why not prometheus-cpp's own Exposer: it serves through civetweb, whose Debian build starts
// every thread with a 100 KB stack, smaller than LibTorch's static TLS, so pthread_create fails
// ("Cannot create threads") in any process that links LibTorch, the trainer's included.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

namespace prometheus {
class Registry;
}

namespace kubetune::metrics {

class HttpEndpoint {
 public:
  // What an extra handler returns: HTTP status and a text/plain body.
  using Handler = std::function<std::pair<int, std::string>()>;

  // `address` is the interface to listen on (a pod's IP, "0.0.0.0", "127.0.0.1"); port 0 lets the
  // OS choose, see port(). Throws std::invalid_argument for a port outside 0..65535 and
  // std::runtime_error naming address:port when it cannot listen.
  HttpEndpoint(std::string address, int port);
  ~HttpEndpoint();
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;

  // Registries are rendered in the order added; their metric names must not overlap.
  void add_registry(std::shared_ptr<prometheus::Registry> registry);
  // `path` must start with '/' and must not be "/metrics". A handler that throws answers 500.
  void add_handler(const std::string& path, Handler handler);

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kubetune::metrics
