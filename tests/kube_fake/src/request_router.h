#pragma once
// Turns one decoded HTTP request into a store operation, the way the apiserver's handler chain
// maps verbs: GET (get/list/watch), POST (create), PUT (update), PATCH, DELETE (one or a
// collection), on the main resource or its /status subresource.
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "object_store.h"
#include "resource_registry.h"
#include "watch_queue.h"
#include "watch_stream.h"

namespace kubetune::kubefake {

struct ApiRequest {
  std::string method;
  std::string path;                          // decoded, without the query
  std::map<std::string, std::string> query;  // decoded
  std::string body;
  std::string content_type;  // media type without parameters
};

struct RouteResult {
  RouteResult() = default;
  RouteResult(int code_, nlohmann::json body_) : code(code_), body(std::move(body_)) {}

  int code = 200;
  nlohmann::json body;                // object, list or Status
  std::string text;                   // plain-text answers (/healthz); body unused then
  std::shared_ptr<WatchQueue> watch;  // set for watch requests
  WatchSettings watch_settings;
};

class RequestRouter {
 public:
  RequestRouter(ResourceRegistry& registry, ObjectStore& store);
  // Never throws for request errors: they come back as a Status with their code.
  RouteResult route(const ApiRequest& request);

 private:
  RouteResult route_resource(const ApiRequest& request);
  void register_crd(const nlohmann::json& crd);

  ResourceRegistry& registry_;
  ObjectStore& store_;
};

// Splits "a=1&b=x%3Dy" into decoded pairs.
std::map<std::string, std::string> parse_query(const std::string& raw_query);

}  // namespace kubetune::kubefake
