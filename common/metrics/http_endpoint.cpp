#include "common/metrics/http_endpoint.h"

#include <cpprest/http_listener.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "common/metrics/free_port.h"

namespace kubetune::metrics {
namespace {

using web::http::http_request;
using web::http::methods;
using web::http::experimental::listener::http_listener;

constexpr const char* kMetricsPath = "/metrics";
constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";
constexpr const char* kTextContentType = "text/plain; charset=utf-8";
// With port 0 we pick a free port and bind it; another process can win the race in between.
constexpr int kBindAttempts = 10;

// Opens a listener on http://address:port/ or throws std::runtime_error saying where and why.
std::unique_ptr<http_listener> open_listener(const std::string& address, int port,
                                             const std::function<void(http_request)>& handle) {
  const std::string where = address + ":" + std::to_string(port);
  try {
    auto listener = std::make_unique<http_listener>("http://" + where + "/");
    listener->support(handle);
    listener->open().wait();
    return listener;
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot listen on " + where + ": " + e.what());
  }
}

// Sends a reply and swallows failures of the send (client went away): an unobserved pplx task
// exception would otherwise surface later on some unrelated thread.
void reply(http_request& request, int status, std::string body, const char* content_type) {
  request.reply(static_cast<web::http::status_code>(status), std::move(body), content_type)
      .then([](pplx::task<void> sent) {
        try {
          sent.get();
        } catch (const std::exception&) {
        }
      });
}

}  // namespace

struct HttpEndpoint::Impl {
  std::string address;
  int port = 0;
  std::unique_ptr<http_listener> listener;

  std::mutex mutex;  // guards registries and handlers, which may be added while serving
  std::vector<std::shared_ptr<prometheus::Registry>> registries;
  std::map<std::string, Handler> handlers;

  void start(int requested_port) {
    // The Impl outlives the listener: ~HttpEndpoint closes it before the Impl goes away.
    const auto handle_request = [this](http_request request) { handle(std::move(request)); };
    if (requested_port != 0) {
      listener = open_listener(address, requested_port, handle_request);
      port = requested_port;
      return;
    }
    for (int attempt = 1;; ++attempt) {
      const int candidate = pick_free_port(address);
      try {
        listener = open_listener(address, candidate, handle_request);
        port = candidate;
        return;
      } catch (const std::runtime_error&) {
        if (attempt == kBindAttempts) throw;
      }
    }
  }

  std::string render_metrics() {
    std::vector<prometheus::MetricFamily> families;
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& registry : registries) {
      auto collected = registry->Collect();
      families.insert(families.end(), std::make_move_iterator(collected.begin()),
                      std::make_move_iterator(collected.end()));
    }
    return prometheus::TextSerializer().Serialize(families);
  }

  void handle(http_request request) {
    const std::string path = request.relative_uri().path();
    if (request.method() != methods::GET) {
      reply(request, 405, "only GET is supported\n", kTextContentType);
      return;
    }
    if (path == kMetricsPath) {
      reply(request, 200, render_metrics(), kMetricsContentType);
      return;
    }
    Handler handler;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = handlers.find(path);
      if (it != handlers.end()) handler = it->second;
    }
    if (!handler) {
      reply(request, 404, "not found: " + path + "\n", kTextContentType);
      return;
    }
    try {
      auto [status, body] = handler();
      reply(request, status, std::move(body), kTextContentType);
    } catch (const std::exception& e) {
      reply(request, 500, std::string("handler failed: ") + e.what() + "\n", kTextContentType);
    }
  }
};

HttpEndpoint::HttpEndpoint(std::string address, int port) : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535) {
    throw std::invalid_argument("port " + std::to_string(port) + " is outside 0..65535");
  }
  impl_->address = std::move(address);
  impl_->start(port);
}

HttpEndpoint::~HttpEndpoint() {
  try {
    impl_->listener->close().wait();  // waits for in-flight requests
  } catch (const std::exception&) {
    // Nothing sensible to do while shutting down.
  }
}

void HttpEndpoint::add_registry(std::shared_ptr<prometheus::Registry> registry) {
  if (!registry) throw std::invalid_argument("add_registry: null registry");
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->registries.push_back(std::move(registry));
}

void HttpEndpoint::add_handler(const std::string& path, Handler handler) {
  if (path.empty() || path[0] != '/' || path == kMetricsPath) {
    throw std::invalid_argument("handler path \"" + path +
                                "\" must start with '/' and not be /metrics");
  }
  if (!handler) throw std::invalid_argument("empty handler for " + path);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->handlers[path] = std::move(handler);
}

int HttpEndpoint::port() const { return impl_->port; }

}  // namespace kubetune::metrics
