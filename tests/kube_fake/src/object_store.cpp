// Create, read, update and patch. Deletion and garbage collection live in store_deletion.cpp,
// history and watches in store_watch.cpp.
#include "object_store.h"

#include "api_error.h"
#include "object_meta.h"
#include "patch.h"

namespace kubetune::kubefake {
namespace {

std::string object_key(const std::string& ns, const std::string& name) { return ns + "/" + name; }

// Everything the generation tracks: the object without metadata (and without status when the
// status lives in its own subresource).
nlohmann::json generation_relevant(nlohmann::json object, bool has_status_subresource) {
  object.erase("metadata");
  if (has_status_subresource) object.erase("status");
  return object;
}

void check_precondition_rv(const Resource& resource, const std::string& name,
                           const nlohmann::json& body, const nlohmann::json& current) {
  std::string wanted = meta_string(body, "resourceVersion");
  if (wanted.empty() && !resource.allows_unconditional_update()) {
    throw invalid(resource.info, name, "metadata.resourceVersion",
                  "Invalid value: 0x0: must be specified for an update");
  }
  if (!wanted.empty() && wanted != meta_string(current, "resourceVersion")) {
    throw conflict(resource.info, name);
  }
}

void check_body_identity(const Resource& resource, const std::string& ns, const std::string& name,
                         nlohmann::json& body) {
  if (!body.is_object()) throw bad_request("the body of the request must be a JSON object");
  check_and_fill_type(body, resource.info);
  std::string body_name = meta_string(body, "name");
  if (body_name != name) {
    throw bad_request("the name of the object (" + body_name +
                      ") does not match the name on the URL (" + name + ")");
  }
  std::string body_ns = meta_string(body, "namespace");
  if (resource.info.namespaced && !body_ns.empty() && body_ns != ns) {
    throw bad_request(
        "the namespace of the provided object does not match the namespace sent on the request");
  }
}

// Metadata only the server writes: a PUT body cannot change it.
void keep_server_metadata(nlohmann::json& next, const nlohmann::json& current) {
  const nlohmann::json& old_meta = current["metadata"];
  nlohmann::json& new_meta = meta(next);
  for (const char* field :
       {"uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds",
        "name", "namespace", "generateName", "resourceVersion"}) {
    if (old_meta.contains(field)) {
      new_meta[field] = old_meta[field];
    } else {
      new_meta.erase(field);
    }
  }
}

}  // namespace

ObjectStore::Bucket& ObjectStore::bucket(const Resource& resource) {
  auto it = buckets_.find(resource.storage_key());
  if (it == buckets_.end()) {
    it = buckets_.emplace(resource.storage_key(), Bucket{resource, {}}).first;
  }
  return it->second;
}

nlohmann::json& ObjectStore::existing(const Resource& resource, const std::string& ns,
                                      const std::string& name) {
  Bucket& b = bucket(resource);
  auto it = b.objects.find(object_key(ns, name));
  if (it == b.objects.end()) throw not_found(resource.info, name);
  return it->second;
}

nlohmann::json ObjectStore::create(const Resource& resource, const std::string& ns,
                                   nlohmann::json body) {
  std::lock_guard<std::mutex> lock(mu_);
  const ResourceInfo& info = resource.info;
  if (!body.is_object()) throw bad_request("the body of the request must be a JSON object");
  check_and_fill_type(body, info);
  nlohmann::json& m = meta(body);
  std::string body_ns = meta_string(body, "namespace");
  if (info.namespaced && !body_ns.empty() && body_ns != ns) {
    throw bad_request(
        "the namespace of the provided object does not match the namespace sent on the request");
  }
  if (!meta_string(body, "resourceVersion").empty()) {
    // The real apiserver answers this with a 500 from its storage layer.
    throw ApiError(500, "InternalError",
                   "resourceVersion should not be set on objects to be created");
  }
  Bucket& b = bucket(resource);
  std::string name = meta_string(body, "name");
  std::string generate = meta_string(body, "generateName");
  if (name.empty() && generate.empty()) {
    throw invalid(info, "", "metadata.name", "Required value: name or generateName is required");
  }
  if (name.empty()) {
    do {
      name = generate + generated_suffix();
    } while (b.objects.count(object_key(ns, name)));
  }
  if (!is_dns_subdomain(name)) {
    throw invalid(info, name, "metadata.name",
                  "Invalid value: \"" + name +
                      "\": a lowercase RFC 1123 subdomain must consist "
                      "of lower case alphanumeric characters, '-' or '.'");
  }
  std::string key = object_key(info.namespaced ? ns : "", name);
  if (b.objects.count(key)) throw already_exists(info, name);

  m["name"] = name;
  if (info.namespaced) {
    m["namespace"] = ns;
  } else {
    m.erase("namespace");
  }
  m["uid"] = new_uid();
  m["creationTimestamp"] = now_rfc3339();
  m.erase("deletionTimestamp");
  m.erase("deletionGracePeriodSeconds");
  if (resource.tracks_generation()) m["generation"] = 1;
  if (info.has_status_subresource) {
    // Status belongs to the controller that reports it: a create cannot set it.
    body.erase("status");
    if (resource.builtin && info.plural == "pods") body["status"] = {{"phase", "Pending"}};
  }
  return commit(b, key, "ADDED", std::move(body), nullptr);
}

nlohmann::json ObjectStore::get(const Resource& resource, const std::string& ns,
                                const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return existing(resource, ns, name);
}

nlohmann::json ObjectStore::list(const Resource& resource, const std::string& ns,
                                 const ListOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  Bucket& b = bucket(resource);
  if (!options.resource_version.empty()) {
    parse_resource_version(options.resource_version);  // validates; any newer state is fine
  }
  nlohmann::json items = nlohmann::json::array();
  for (const auto& [key, object] : b.objects) {
    if (!ns.empty() && meta_string(object, "namespace") != ns) continue;
    if (!options.labels.matches(object)) continue;
    nlohmann::json item = object;
    if (resource.builtin) {
      // Built-in list items carry no kind/apiVersion on the wire; custom resources do.
      item.erase("kind");
      item.erase("apiVersion");
    }
    items.push_back(std::move(item));
  }
  return {{"kind", resource.info.kind + "List"},
          {"apiVersion", resource.info.api_version()},
          {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
          {"items", std::move(items)}};
}

nlohmann::json ObjectStore::replace(const Resource& resource, const std::string& ns,
                                    const std::string& name, nlohmann::json body) {
  std::lock_guard<std::mutex> lock(mu_);
  return replace_locked(resource, ns, name, std::move(body));
}

nlohmann::json ObjectStore::replace_locked(const Resource& resource, const std::string& ns,
                                           const std::string& name, nlohmann::json body) {
  check_body_identity(resource, ns, name, body);
  const nlohmann::json current = existing(resource, ns, name);
  check_precondition_rv(resource, name, body, current);
  nlohmann::json next = std::move(body);
  keep_server_metadata(next, current);
  if (resource.info.has_status_subresource) {
    // Writes to the main resource cannot change status: that is what /status is for.
    if (current.contains("status")) {
      next["status"] = current["status"];
    } else {
      next.erase("status");
    }
  }
  return finish_update(bucket(resource), object_key(resource.info.namespaced ? ns : "", name),
                       current, std::move(next));
}

nlohmann::json ObjectStore::replace_status(const Resource& resource, const std::string& ns,
                                           const std::string& name, const nlohmann::json& body) {
  std::lock_guard<std::mutex> lock(mu_);
  return replace_status_locked(resource, ns, name, body);
}

nlohmann::json ObjectStore::replace_status_locked(const Resource& resource, const std::string& ns,
                                                  const std::string& name,
                                                  const nlohmann::json& body) {
  nlohmann::json checked = body;
  check_body_identity(resource, ns, name, checked);
  const nlohmann::json current = existing(resource, ns, name);
  check_precondition_rv(resource, name, checked, current);
  // Only status changes through /status; spec and metadata edits in the body are ignored.
  nlohmann::json next = current;
  if (checked.contains("status")) {
    next["status"] = checked["status"];
  } else {
    next.erase("status");
  }
  return finish_update(bucket(resource), object_key(resource.info.namespaced ? ns : "", name),
                       current, std::move(next));
}

nlohmann::json ObjectStore::finish_update(Bucket& b, const std::string& key,
                                          const nlohmann::json& current, nlohmann::json next) {
  const Resource& resource = b.resource;
  if (resource.tracks_generation()) {
    bool has_status = resource.info.has_status_subresource;
    int64_t generation = current["metadata"].value("generation", int64_t{1});
    if (generation_relevant(next, has_status) != generation_relevant(current, has_status)) {
      ++generation;
    }
    meta(next)["generation"] = generation;
  }
  // A write that changes nothing is a no-op: no new resourceVersion, no watch event.
  if (next == current) return current;
  bool deleting = next["metadata"].contains("deletionTimestamp");
  bool finalizers_left =
      next["metadata"].contains("finalizers") && !next["metadata"]["finalizers"].empty();
  if (deleting && !finalizers_left) return finalize_delete(b, key, std::move(next), "Background");
  return commit(b, key, "MODIFIED", std::move(next), current);
}

nlohmann::json ObjectStore::patch(const Resource& resource, const std::string& ns,
                                  const std::string& name, const std::string& content_type,
                                  const std::string& patch_body, bool status_subresource) {
  std::lock_guard<std::mutex> lock(mu_);
  const nlohmann::json current = existing(resource, ns, name);
  nlohmann::json patched = apply_patch(current, content_type, patch_body);
  // The patched object goes through the same checks as a PUT; it keeps the current
  // resourceVersion unless the patch set one, which makes the patch conditional.
  if (status_subresource) return replace_status_locked(resource, ns, name, patched);
  return replace_locked(resource, ns, name, std::move(patched));
}

}  // namespace kubetune::kubefake
