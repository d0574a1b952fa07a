#include "operator/kube/client.h"

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <boost/asio/ssl.hpp>
#include <cstdio>
#include <optional>

#include "operator/kube/kube_types.h"
#include "operator/kube/rate_limiter.h"
#include "operator/kube/watch_stream.h"

namespace kubetune::op::kube {
namespace {

using nlohmann::json;
using web::http::http_request;
using web::http::http_response;
using web::http::method;
using web::http::client::http_client;
using web::http::client::http_client_config;

// TLS as kubeconfig describes it: the cluster CA (file or inline PEM) and, for certificate
// users, the client certificate and key.
void configure_tls(const ClientConfig& c, boost::asio::ssl::context& ctx) {
  if (!c.ca_file.empty()) ctx.load_verify_file(c.ca_file);
  if (!c.ca_data.empty()) ctx.add_certificate_authority(boost::asio::buffer(c.ca_data));
  if (!c.cert_file.empty()) ctx.use_certificate_chain_file(c.cert_file);
  if (!c.cert_data.empty()) ctx.use_certificate_chain(boost::asio::buffer(c.cert_data));
  if (!c.key_file.empty()) ctx.use_private_key_file(c.key_file, boost::asio::ssl::context::pem);
  if (!c.key_data.empty()) {
    ctx.use_private_key(boost::asio::buffer(c.key_data), boost::asio::ssl::context::pem);
  }
}

std::unique_ptr<http_client> make_client(const ClientConfig& c, std::chrono::seconds timeout) {
  http_client_config cfg;
  cfg.set_timeout(timeout);
  cfg.set_validate_certificates(!c.insecure_skip_tls_verify);
  if (c.server.rfind("https://", 0) == 0) {
    cfg.set_ssl_context_callback([c](boost::asio::ssl::context& ctx) { configure_tls(c, ctx); });
  }
  return std::make_unique<http_client>(c.server, cfg);
}

http_request make_request(const ClientConfig& c, const std::string& verb, const std::string& path) {
  http_request req{method(verb)};
  req.set_request_uri(path);
  req.headers().add("Accept", "application/json");
  const std::string token = c.bearer_token();
  if (!token.empty()) req.headers().add("Authorization", "Bearer " + token);
  return req;
}

// The Status object an error answer carries; nullopt when the body is not one (a proxy's HTML
// page, plain text).
std::optional<k8s::Status> status_of(const std::string& body) {
  const json parsed = json::parse(body, nullptr, false);
  if (!parsed.is_object()) return std::nullopt;
  try {
    return parsed.get<k8s::Status>();
  } catch (const json::exception&) {
    return std::nullopt;  // an object, but not a Status
  }
}

ApiError error_from(const std::string& verb, const std::string& path, int code,
                    const std::string& body) {
  std::string reason, message = body;
  if (const auto status = status_of(body)) {
    reason = status->reason.value_or("");
    message = status->message.value_or(body);
  }
  return ApiError(code, reason,
                  verb + " " + path + ": " + std::to_string(code) + " " + reason + ": " + message);
}

}  // namespace

struct KubeClient::Impl {
  std::unique_ptr<http_client> client;
  std::unique_ptr<RateLimiter> limiter;
  RequestObserver observer;
};

struct WatchStream::Impl {
  std::unique_ptr<http_client> client;  // its own connection, so cancel() touches nothing else
  pplx::cancellation_token_source cancel;
  concurrency::streams::istream body;
  std::atomic<bool> cancelled{false};
};

KubeClient::KubeClient(ClientConfig config)
    : config_(std::move(config)), impl_(std::make_unique<Impl>()) {
  impl_->client = make_client(config_, config_.request_timeout);
  impl_->limiter = std::make_unique<RateLimiter>(config_.qps, config_.burst);
}

void KubeClient::set_request_observer(RequestObserver observer) {
  impl_->observer = std::move(observer);
}

KubeClient::~KubeClient() = default;

json KubeClient::request(const std::string& verb, const std::string& path, const json& body,
                         const std::string& content_type) {
  http_request req = make_request(config_, verb, path);
  if (!body.is_null()) req.set_body(body.dump(), content_type);
  impl_->limiter->wait();
  const auto start = std::chrono::steady_clock::now();
  const auto observe = [&](int code) {
    if (impl_->observer)
      impl_->observer(
          verb, code,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  };
  http_response resp;
  std::string text;
  try {
    resp = impl_->client->request(req).get();
    text = resp.extract_utf8string(true).get();
  } catch (const std::exception& e) {
    observe(0);
    throw ApiError(0, "", verb + " " + path + ": " + e.what());
  }
  const int code = resp.status_code();
  observe(code);
  if (code < 200 || code >= 300) throw error_from(verb, path, code, text);
  return text.empty() ? json::object() : json::parse(text, nullptr, false);
}

json KubeClient::list(const std::string& collection, const std::string& label_selector) {
  return get(label_selector.empty() ? collection
                                    : collection + "?labelSelector=" + url_encode(label_selector));
}

bool KubeClient::remove(const std::string& item, const std::string& propagation) {
  k8s::DeleteOptions options;
  options.api_version = "v1";
  options.kind = "DeleteOptions";
  options.propagation_policy = propagation;
  try {
    request("DELETE", item, options);
    return true;
  } catch (const ApiError& e) {
    if (e.not_found()) return false;
    throw;
  }
}

std::unique_ptr<WatchStream> KubeClient::watch(const std::string& collection,
                                               const std::string& resource_version,
                                               const std::string& label_selector,
                                               int timeout_seconds) {
  std::string path = collection + "?watch=true&allowWatchBookmarks=true&timeoutSeconds=" +
                     std::to_string(timeout_seconds);
  if (!resource_version.empty()) path += "&resourceVersion=" + url_encode(resource_version);
  if (!label_selector.empty()) path += "&labelSelector=" + url_encode(label_selector);
  auto impl = std::make_unique<WatchStream::Impl>();
  // The server ends the watch after timeout_seconds; the client gives it some slack on top.
  impl->client = make_client(config_, std::chrono::seconds(timeout_seconds + 30));
  http_response resp;
  try {
    resp =
        impl->client->request(make_request(config_, "GET", path), impl->cancel.get_token()).get();
  } catch (const std::exception& e) {
    throw ApiError(0, "", "watch " + path + ": " + e.what());
  }
  if (resp.status_code() != 200) {
    throw error_from("watch", path, resp.status_code(), resp.extract_utf8string(true).get());
  }
  impl->body = resp.body();
  return std::make_unique<WatchStream>(std::move(impl));
}

WatchStream::WatchStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WatchStream::~WatchStream() { cancel(); }

bool WatchStream::next(json& event) {
  while (!impl_->cancelled) {
    concurrency::streams::container_buffer<std::string> line;
    try {
      const size_t n = impl_->body.read_line(line).get();
      if (n == 0) {
        if (impl_->body.is_eof()) return false;
        continue;  // a blank keep-alive line
      }
    } catch (const std::exception& e) {
      if (impl_->cancelled) return false;
      throw ApiError(0, "", std::string("watch stream: ") + e.what());
    }
    event = json::parse(line.collection(), nullptr, false);
    if (event.is_discarded()) throw ApiError(0, "", "watch stream: malformed event");
    return true;
  }
  return false;
}

void WatchStream::cancel() {
  if (!impl_->cancelled.exchange(true)) impl_->cancel.cancel();
}

std::string url_encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace kubetune::op::kube
