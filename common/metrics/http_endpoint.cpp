#include "common/metrics/http_endpoint.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kubetune::metrics {
namespace {

const char* status_text(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return code >= 500 ? "Internal Server Error" : "Error";
  }
}

void reply(mg_connection* conn, int code, const std::string& content_type,
           const std::string& body) {
  mg_printf(
      conn,
      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
      code, status_text(code), content_type.c_str(), body.size());
  mg_write(conn, body.data(), body.size());
}

// GET only; every other method of a known path is 405 (civetweb answers 404 for unknown paths).
class GetOnlyHandler : public CivetHandler {
 public:
  bool handlePost(CivetServer*, mg_connection* conn) override { return not_allowed(conn); }
  bool handlePut(CivetServer*, mg_connection* conn) override { return not_allowed(conn); }
  bool handleDelete(CivetServer*, mg_connection* conn) override { return not_allowed(conn); }
  bool handlePatch(CivetServer*, mg_connection* conn) override { return not_allowed(conn); }

 private:
  static bool not_allowed(mg_connection* conn) {
    reply(conn, 405, "text/plain; charset=utf-8", "method not allowed\n");
    return true;
  }
};

class MetricsHandler : public GetOnlyHandler {
 public:
  void add(std::shared_ptr<prometheus::Registry> registry) {
    std::lock_guard<std::mutex> lock(mutex_);
    registries_.push_back(std::move(registry));
  }
  bool handleGet(CivetServer*, mg_connection* conn) override {
    std::vector<prometheus::MetricFamily> families;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& r : registries_) {
        auto f = r->Collect();
        families.insert(families.end(), std::make_move_iterator(f.begin()),
                        std::make_move_iterator(f.end()));
      }
    }
    reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8",
          prometheus::TextSerializer().Serialize(families));
    return true;
  }

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<prometheus::Registry>> registries_;
};

class FunctionHandler : public GetOnlyHandler {
 public:
  explicit FunctionHandler(HttpEndpoint::Handler f) : f_(std::move(f)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    std::pair<int, std::string> r;
    try {
      r = f_();
    } catch (const std::exception& e) {
      r = {500, std::string("error: ") + e.what()};
    }
    reply(conn, r.first, "text/plain; charset=utf-8", r.second);
    return true;
  }

 private:
  HttpEndpoint::Handler f_;
};

// Opens and closes a TCP connection to address:port (IPv4), ignoring failure.
void poke(const std::string& address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const std::string host = address == "0.0.0.0" ? "127.0.0.1" : address;
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) {
    connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  }
  close(fd);
}

}  // namespace

struct HttpEndpoint::Impl {
  std::string address;
  std::unique_ptr<CivetServer> server;
  MetricsHandler metrics;
  std::mutex mutex;
  std::vector<std::unique_ptr<FunctionHandler>> handlers;
};

HttpEndpoint::HttpEndpoint(std::string address, int port) : impl_(std::make_unique<Impl>()) {
  impl_->address = address;
  if (port < 0 || port > 65535) {
    throw std::invalid_argument("port " + std::to_string(port) + " is outside 0..65535");
  }
  const std::string where = address + ":" + std::to_string(port);
  try {
    impl_->server = std::make_unique<CivetServer>(
        std::vector<std::string>{"listening_ports", where, "num_threads", "2"});
  } catch (const CivetException& e) {
    throw std::runtime_error("cannot listen on " + where + ": " + e.what());
  }
  impl_->server->addHandler("/metrics$", impl_->metrics);
}

HttpEndpoint::~HttpEndpoint() {
  if (!impl_->server) return;
  // close() joins civetweb's threads before the handlers go. Its listener sees the stop request
  // only when poll() returns, after up to 2 s without traffic: connections of our own wake it.
  const int port = this->port();
  std::atomic<bool> closed{false};
  std::thread closer([&] {
    impl_->server->close();
    closed = true;
  });
  while (!closed) {
    poke(impl_->address, port);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  closer.join();
}

void HttpEndpoint::add_registry(std::shared_ptr<prometheus::Registry> registry) {
  if (!registry) throw std::invalid_argument("add_registry: null registry");
  impl_->metrics.add(std::move(registry));
}

void HttpEndpoint::add_handler(const std::string& path, Handler handler) {
  if (path.empty() || path[0] != '/' || path == "/metrics") {
    throw std::invalid_argument("handler path \"" + path +
                                "\" must start with '/' and not be /metrics");
  }
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->handlers.push_back(std::make_unique<FunctionHandler>(std::move(handler)));
  impl_->server->addHandler(path + "$", *impl_->handlers.back());
}

int HttpEndpoint::port() const {
  const auto ports = impl_->server->getListeningPorts();
  return ports.empty() ? -1 : ports.front();
}

}  // namespace kubetune::metrics
