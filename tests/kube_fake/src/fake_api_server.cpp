// The HTTP face of the fake: a cpprestsdk listener on 127.0.0.1 that checks the bearer token,
// counts requests, applies injected failures, and hands everything else to the RequestRouter.
// Watch answers become chunked bodies fed by a WatchStream.
#include "kubetune/kubefake/fake_api_server.h"

#include <arpa/inet.h>
#include <cpprest/http_listener.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "api_error.h"
#include "object_store.h"
#include "request_router.h"
#include "resource_registry.h"
#include "watch_stream.h"

namespace kubetune::kubefake {
namespace {

using web::http::http_request;
using web::http::http_response;

// Asks the kernel for a free port. Another process could grab it before the listener binds;
// the constructor retries for that case.
int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("kube_fake: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  if (port <= 0) throw std::runtime_error("kube_fake: could not find a free port");
  return port;
}

std::string reason_for(int code) {
  switch (code) {
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "Unknown";
  }
}

// "application/merge-patch+json; charset=utf-8" -> "application/merge-patch+json".
std::string media_type(const std::string& header) {
  std::string type = header.substr(0, header.find(';'));
  type.erase(std::remove(type.begin(), type.end(), ' '), type.end());
  std::transform(type.begin(), type.end(), type.begin(), ::tolower);
  return type;
}

void reply_json(const http_request& request, int code, const nlohmann::json& body) {
  http_response response(static_cast<web::http::status_code>(code));
  response.set_body(body.dump(), "application/json");
  request.reply(response).then([](pplx::task<void> t) {
    try {
      t.get();
    } catch (const std::exception&) {  // client went away: nothing to do
    }
  });
}

}  // namespace

class FakeApiServer::Impl {
 public:
  explicit Impl(int port);
  ~Impl();

  void handle(const http_request& request);
  RouteResult route_direct(const std::string& method, const std::string& target,
                           const std::string& body, const std::string& content_type);
  void drop_watches();

  ResourceRegistry registry;
  ObjectStore store;
  RequestRouter router{registry, store};
  int port = 0;

  mutable std::mutex mu;  // guards everything below
  std::string token;
  std::vector<std::pair<std::string, std::string>> requests;  // method, path
  struct Injected {
    std::string method, prefix;
    int code;
    int remaining;
  };
  std::vector<Injected> injected;
  std::vector<std::unique_ptr<WatchStream>> streams;
  std::chrono::milliseconds bookmark_interval{1000};
  bool stopping = false;  // set by the destructor: no new watch streams

 private:
  bool reject_early(const http_request& request, const std::string& method,
                    const std::string& path);
  void dispatch(const http_request& request, const std::string& method, const std::string& path,
                const std::string& body);
  void start_watch(const http_request& request, RouteResult& result);

  std::unique_ptr<web::http::experimental::listener::http_listener> listener_;
};

FakeApiServer::Impl::Impl(int requested_port) {
  for (int attempt = 0;; ++attempt) {
    port = requested_port != 0 ? requested_port : pick_free_port();
    std::string url = "http://127.0.0.1:" + std::to_string(port);
    listener_ = std::make_unique<web::http::experimental::listener::http_listener>(url);
    listener_->support([this](http_request request) { handle(request); });
    try {
      listener_->open().wait();
      return;
    } catch (const std::exception& e) {
      if (requested_port != 0 || attempt >= 5) {
        throw std::runtime_error("kube_fake: cannot listen on " + url + ": " + e.what());
      }
    }
  }
}

FakeApiServer::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  // Streams first: the listener's close() waits for every response to finish, and a watch body
  // only finishes when its stream closes it.
  drop_watches();
  {
    std::lock_guard<std::mutex> lock(mu);
    streams.clear();  // joins the writer threads
  }
  try {
    listener_->close().wait();
  } catch (const std::exception&) {
  }
}

void FakeApiServer::Impl::drop_watches() {
  store.close_watches();
  std::lock_guard<std::mutex> lock(mu);
  for (auto& stream : streams) stream->stop();
}

void FakeApiServer::Impl::handle(const http_request& request) {
  std::string method = request.method();
  std::string path = web::uri::decode(request.relative_uri().path());
  if (reject_early(request, method, path)) return;
  // Handled synchronously: the listener's close() waits for running handlers, so nothing can
  // touch this object after the destructor has closed the listener.
  std::string body;
  try {
    http_request copy = request;  // extract_string is not const
    body = copy.extract_string(true).get();
  } catch (const std::exception&) {
    // An unreadable body routes as empty; the router answers 400 where a body is required.
  }
  dispatch(request, method, path, body);
}

// Counting, authentication and injected failures happen before any routing.
bool FakeApiServer::Impl::reject_early(const http_request& request, const std::string& method,
                                       const std::string& path) {
  std::lock_guard<std::mutex> lock(mu);
  requests.emplace_back(method, path);
  if (!token.empty()) {
    auto header = request.headers().find("Authorization");
    if (header == request.headers().end() || header->second != "Bearer " + token) {
      reply_json(request, 401, make_status(401, "Unauthorized", "Unauthorized"));
      return true;
    }
  }
  for (Injected& failure : injected) {
    if (failure.remaining > 0 && failure.method == method && path.rfind(failure.prefix, 0) == 0) {
      --failure.remaining;
      reply_json(request, failure.code,
                 make_status(failure.code, reason_for(failure.code), "injected failure"));
      return true;
    }
  }
  return false;
}

void FakeApiServer::Impl::dispatch(const http_request& request, const std::string& method,
                                   const std::string& path, const std::string& body) {
  ApiRequest api{method, path, parse_query(request.relative_uri().query()), body,
                 media_type(request.headers().content_type())};
  RouteResult result = router.route(api);
  if (result.watch) {
    start_watch(request, result);
  } else if (!result.text.empty()) {
    request.reply(static_cast<web::http::status_code>(result.code), result.text);
  } else {
    reply_json(request, result.code, result.body);
  }
}

void FakeApiServer::Impl::start_watch(const http_request& request, RouteResult& result) {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) {
    result.watch->close();
    reply_json(request, 503, make_status(503, "ServiceUnavailable", "the server is shutting down"));
    return;
  }
  // Forget streams that ended on their own (timeout, client gone).
  streams.erase(
      std::remove_if(streams.begin(), streams.end(), [](const auto& s) { return s->finished(); }),
      streams.end());
  result.watch_settings.bookmark_interval = bookmark_interval;
  auto stream = std::make_unique<WatchStream>(result.watch, result.watch_settings);
  // No Content-Length: the listener sends the body chunked, as bytes arrive in the buffer.
  http_response response(web::http::status_codes::OK);
  response.set_body(stream->body(), "application/json");
  std::shared_ptr<WatchQueue> queue = result.watch;
  request.reply(response).then([queue](pplx::task<void> t) {
    try {
      t.get();
    } catch (const std::exception&) {
    }
    queue->close();  // the response is over (sent in full, or the client went away)
  });
  stream->start();
  streams.push_back(std::move(stream));
}

RouteResult FakeApiServer::Impl::route_direct(const std::string& method, const std::string& target,
                                              const std::string& body,
                                              const std::string& content_type) {
  size_t question = target.find('?');
  ApiRequest api{method, target.substr(0, question),
                 question == std::string::npos ? std::map<std::string, std::string>{}
                                               : parse_query(target.substr(question + 1)),
                 body, media_type(content_type)};
  if (api.query.count("watch")) {
    return {400, make_status(400, "BadRequest", "call() cannot watch; use an HTTP client")};
  }
  return router.route(api);
}

// ---- FakeApiServer: thin forwarding to Impl. ----

FakeApiServer::FakeApiServer(int port) : impl_(std::make_unique<Impl>(port)) {}
FakeApiServer::~FakeApiServer() = default;

std::string FakeApiServer::url() const { return "http://127.0.0.1:" + std::to_string(impl_->port); }
int FakeApiServer::port() const { return impl_->port; }

void FakeApiServer::set_watch_history_limit(size_t n) { impl_->store.set_history_limit(n); }
void FakeApiServer::compact_now() { impl_->store.compact_now(); }
void FakeApiServer::drop_watches() { impl_->drop_watches(); }

void FakeApiServer::set_bookmark_interval(std::chrono::milliseconds interval) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->bookmark_interval = interval;
}

void FakeApiServer::register_resource(ResourceInfo info) { impl_->registry.add(info); }

nlohmann::json FakeApiServer::get(const std::string& path) {
  RouteResult result = impl_->route_direct("GET", path, "", "");
  return result.text.empty() ? result.body : nlohmann::json(result.text);
}

FakeResponse FakeApiServer::call(const std::string& method, const std::string& path,
                                 const nlohmann::json& body, const std::string& content_type) {
  RouteResult result =
      impl_->route_direct(method, path, body.is_null() ? "" : body.dump(), content_type);
  return {result.code, result.text.empty() ? result.body : nlohmann::json(result.text)};
}

size_t FakeApiServer::request_count(const std::string& method,
                                    const std::string& path_prefix) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return std::count_if(impl_->requests.begin(), impl_->requests.end(), [&](const auto& r) {
    return r.first == method && r.second.rfind(path_prefix, 0) == 0;
  });
}

void FakeApiServer::set_token(std::string bearer) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->token = std::move(bearer);
}

void FakeApiServer::inject_error(const std::string& method, const std::string& path_prefix,
                                 int code, int times) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->injected.push_back({method, path_prefix, code, times});
}

size_t FakeApiServer::open_watch_count() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return std::count_if(impl_->streams.begin(), impl_->streams.end(),
                       [](const auto& s) { return !s->finished(); });
}

}  // namespace kubetune::kubefake
