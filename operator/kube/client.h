// A small Kubernetes REST client on cpprestsdk: JSON in, JSON out, errors as ApiError. It knows
// nothing about FineTuneJobs; the controller builds paths with Resource.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "operator/kube/api_error.h"
#include "operator/kube/client_config.h"
#include "operator/kube/resource.h"

namespace kubetune::op::kube {

class WatchStream;

class KubeClient {
 public:
  explicit KubeClient(ClientConfig config);
  ~KubeClient();

  const ClientConfig& config() const { return config_; }

  // path may carry a query. Throws ApiError for non-2xx answers and transport failures.
  nlohmann::json request(const std::string& method, const std::string& path,
                         const nlohmann::json& body = nullptr,
                         const std::string& content_type = "application/json");

  nlohmann::json get(const std::string& path) { return request("GET", path); }
  nlohmann::json list(const std::string& collection, const std::string& label_selector = "");
  nlohmann::json create(const std::string& collection, const nlohmann::json& object) {
    return request("POST", collection, object);
  }
  // PUT with the object's resourceVersion: 409 Conflict when someone wrote in between.
  nlohmann::json update(const std::string& item, const nlohmann::json& object) {
    return request("PUT", item, object);
  }
  nlohmann::json update_status(const std::string& item, const nlohmann::json& object) {
    return request("PUT", item + "/status", object);
  }
  nlohmann::json merge_patch(const std::string& path, const nlohmann::json& patch) {
    return request("PATCH", path, patch, "application/merge-patch+json");
  }
  // Deletes with the given propagation; returns false when the object was already gone.
  bool remove(const std::string& item, const std::string& propagation = "Background");

  // Called after each request (not watches) with its verb, HTTP status (0: no answer) and
  // duration: the operator's request metrics. Set before the client is shared between threads.
  using RequestObserver = std::function<void(const std::string& verb, int code, double seconds)>;
  void set_request_observer(RequestObserver observer);

  // Starts a watch of `collection` from `resource_version`, with bookmarks.
  std::unique_ptr<WatchStream> watch(const std::string& collection,
                                     const std::string& resource_version,
                                     const std::string& label_selector, int timeout_seconds);

  struct Impl;

 private:
  ClientConfig config_;
  std::unique_ptr<Impl> impl_;
};

// Percent-encodes a query value (label selectors contain '=' and ',').
std::string url_encode(const std::string& s);

}  // namespace kubetune::op::kube
