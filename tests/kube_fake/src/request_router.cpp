#include "request_router.h"

#include <cpprest/uri.h>

#include "api_error.h"
#include "api_path.h"
#include "object_meta.h"

namespace kubetune::kubefake {
namespace {

std::string query_value(const ApiRequest& request, const std::string& key) {
  auto it = request.query.find(key);
  return it == request.query.end() ? "" : it->second;
}

bool query_flag(const ApiRequest& request, const std::string& key) {
  std::string value = query_value(request, key);
  return value == "1" || value == "true";
}

// What the real API server serves and this fake does not (the operator does not use it): refused,
// so that a new use fails here instead of passing on an unfiltered answer.
void refuse_unserved_parameters(const ApiRequest& request) {
  for (const char* key : {"fieldSelector", "resourceVersionMatch", "sendInitialEvents"}) {
    if (request.query.count(key)) {
      throw bad_request(std::string("kube_fake does not serve ") + key +
                        " (tests/kube_fake/README.md); the real API server's tests do");
    }
  }
}

nlohmann::json parse_body(const std::string& body) {
  if (body.empty()) return nlohmann::json::object();
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw bad_request(std::string("the body of the request is not valid JSON: ") + e.what());
  }
}

ApiError method_not_allowed(const std::string& method) {
  return ApiError(
      405, "MethodNotAllowed",
      "the server does not allow this method on the requested resource (" + method + ")");
}

DeleteOptions delete_options(const ApiRequest& request) {
  nlohmann::json body = parse_body(request.body);
  DeleteOptions options;
  options.propagation_policy = body.value("propagationPolicy", "");
  if (body.value("orphanDependents", false)) options.propagation_policy = "Orphan";
  std::string from_query = query_value(request, "propagationPolicy");
  if (!from_query.empty()) options.propagation_policy = from_query;
  if (body.contains("preconditions") && body["preconditions"].is_object()) {
    options.precondition_uid = body["preconditions"].value("uid", "");
    options.precondition_resource_version = body["preconditions"].value("resourceVersion", "");
  }
  return options;
}

}  // namespace

std::map<std::string, std::string> parse_query(const std::string& raw_query) {
  std::map<std::string, std::string> query;
  for (const auto& [key, value] : web::uri::split_query(raw_query)) {
    query[web::uri::decode(key)] = web::uri::decode(value);
  }
  return query;
}

RequestRouter::RequestRouter(ResourceRegistry& registry, ObjectStore& store)
    : registry_(registry), store_(store) {}

RouteResult RequestRouter::route(const ApiRequest& request) {
  try {
    if (request.path == "/healthz" || request.path == "/readyz" || request.path == "/livez") {
      RouteResult result;
      result.text = "ok";
      return result;
    }
    if (request.path == "/version") {
      return {200, {{"major", "1"}, {"minor", "30"}, {"gitVersion", "v1.30.0-kubetune-fake"}}};
    }
    return route_resource(request);
  } catch (const ApiError& e) {
    return {e.code(), e.status()};
  } catch (const std::exception& e) {
    return {500, make_status(500, "InternalError", e.what())};
  }
}

RouteResult RequestRouter::route_resource(const ApiRequest& request) {
  std::optional<ApiPath> path = parse_api_path(request.path);
  if (!path) throw page_not_found();
  std::optional<Resource> found = registry_.find(path->group, path->version, path->plural);
  if (!found) throw page_not_found();
  const Resource& resource = *found;
  const ResourceInfo& info = resource.info;
  // A namespaced resource addressed without a namespace only has a cluster-wide list/watch; a
  // cluster-scoped one is never addressed inside a namespace.
  if (!info.namespaced && !path->namespace_.empty()) throw page_not_found();
  if (info.namespaced && path->namespace_.empty() && !path->name.empty()) throw page_not_found();
  bool status = path->subresource == "status";
  if (!path->subresource.empty() && !(status && info.has_status_subresource)) {
    throw page_not_found();
  }
  const std::string& ns = path->namespace_;
  const std::string& name = path->name;
  const std::string& method = request.method;

  refuse_unserved_parameters(request);
  if (method == "GET" && query_flag(request, "watch")) {
    // Collections only: the operator never watches one named object.
    if (!name.empty()) throw bad_request("kube_fake serves watches of collections only");
    WatchOptions options;
    options.labels = LabelSelector::parse(query_value(request, "labelSelector"));
    options.resource_version = query_value(request, "resourceVersion");
    options.bookmarks = query_flag(request, "allowWatchBookmarks");
    RouteResult result;
    result.watch_settings.kind = info.kind;
    result.watch_settings.api_version = info.api_version();
    result.watch_settings.bookmarks = options.bookmarks;
    std::string timeout = query_value(request, "timeoutSeconds");
    if (!timeout.empty()) {
      result.watch_settings.deadline =
          std::chrono::steady_clock::now() +
          std::chrono::seconds(static_cast<int64_t>(parse_resource_version(timeout)));
    }
    result.watch = store_.watch(resource, ns, options);
    return result;
  }
  if (name.empty()) {
    if (method == "GET" || method == "DELETE") {
      ListOptions options;
      options.labels = LabelSelector::parse(query_value(request, "labelSelector"));
      options.resource_version = query_value(request, "resourceVersion");
      nlohmann::json list = store_.list(resource, ns, options);
      if (method == "GET") return {200, list};
      // deletecollection: delete what the list selected and answer with it.
      DeleteOptions del = delete_options(request);
      for (const nlohmann::json& item : list["items"]) {
        try {
          store_.remove(resource, meta_string(item, "namespace"), meta_string(item, "name"), del);
        } catch (const ApiError&) {
          // Gone in the meantime (e.g. garbage collected through an earlier item): fine.
        }
      }
      return {200, list};
    }
    if (method == "POST") {
      if (info.namespaced && ns.empty()) throw method_not_allowed(method);
      nlohmann::json created = store_.create(resource, ns, parse_body(request.body));
      if (resource.builtin && info.plural == "customresourcedefinitions") register_crd(created);
      return {201, created};
    }
    throw method_not_allowed(method);
  }
  if (method == "GET") return {200, store_.get(resource, ns, name)};
  if (method == "PUT") {
    nlohmann::json body = parse_body(request.body);
    return {200, status ? store_.replace_status(resource, ns, name, body)
                        : store_.replace(resource, ns, name, body)};
  }
  if (method == "PATCH") {
    return {200, store_.patch(resource, ns, name, request.content_type, request.body, status)};
  }
  if (method == "DELETE" && !status) {
    nlohmann::json object = store_.remove(resource, ns, name, delete_options(request));
    // 200 when the object is gone, 202 when finalizers still hold it (as the apiserver answers).
    const nlohmann::json& m = object["metadata"];
    bool pending = m.contains("finalizers") && !m["finalizers"].empty();
    return {pending ? 202 : 200, object};
  }
  throw method_not_allowed(method);
}

// Creating a CustomResourceDefinition makes its resource servable, as on a real cluster.
void RequestRouter::register_crd(const nlohmann::json& crd) {
  const nlohmann::json& spec = crd.value("spec", nlohmann::json::object());
  const nlohmann::json& names = spec.value("names", nlohmann::json::object());
  for (const nlohmann::json& version : spec.value("versions", nlohmann::json::array())) {
    if (!version.value("served", true)) continue;
    ResourceInfo info;
    info.group = spec.value("group", "");
    info.version = version.value("name", "");
    info.plural = names.value("plural", "");
    info.kind = names.value("kind", "");
    info.namespaced = spec.value("scope", "Namespaced") == "Namespaced";
    info.has_status_subresource =
        version.contains("subresources") && version["subresources"].contains("status");
    registry_.add(info);
  }
}

}  // namespace kubetune::kubefake
