// Deletion: finalizers (deletionTimestamp first, removal when the last finalizer goes), and the
// garbage collector's cascade over metadata.ownerReferences, done synchronously.
#include "api_error.h"
#include "object_meta.h"
#include "object_store.h"

namespace kubetune::kubefake {
namespace {

bool has_finalizers(const nlohmann::json& object) {
  const nlohmann::json& m = object["metadata"];
  return m.contains("finalizers") && m["finalizers"].is_array() && !m["finalizers"].empty();
}

bool owned_by(const nlohmann::json& object, const std::string& owner_uid) {
  const nlohmann::json& m = object["metadata"];
  if (!m.contains("ownerReferences") || !m["ownerReferences"].is_array()) return false;
  for (const nlohmann::json& ref : m["ownerReferences"]) {
    if (ref.is_object() && ref.value("uid", "") == owner_uid) return true;
  }
  return false;
}

}  // namespace

nlohmann::json ObjectStore::remove(const Resource& resource, const std::string& ns,
                                   const std::string& name, const DeleteOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  const nlohmann::json& current = existing(resource, ns, name);
  std::string uid = meta_string(current, "uid");
  if (!options.precondition_uid.empty() && options.precondition_uid != uid) {
    throw ApiError(409, "Conflict",
                   "Precondition failed: UID in precondition: " + options.precondition_uid +
                       ", UID in object meta: " + uid);
  }
  std::string rv = meta_string(current, "resourceVersion");
  if (!options.precondition_resource_version.empty() &&
      options.precondition_resource_version != rv) {
    throw ApiError(409, "Conflict",
                   "Precondition failed: ResourceVersion in precondition: " +
                       options.precondition_resource_version +
                       ", ResourceVersion in object meta: " + rv);
  }
  return delete_locked(bucket(resource), ns + "/" + name, options.propagation_policy);
}

nlohmann::json ObjectStore::delete_locked(Bucket& b, const std::string& key,
                                          const std::string& policy) {
  nlohmann::json current = b.objects.at(key);
  if (!has_finalizers(current)) return finalize_delete(b, key, std::move(current), policy);
  // With finalizers the object only gets marked; whoever owns a finalizer removes it, and the
  // update that removes the last one deletes the object (see finish_update).
  if (current["metadata"].contains("deletionTimestamp")) return current;
  nlohmann::json marked = current;
  marked["metadata"]["deletionTimestamp"] = now_rfc3339();
  marked["metadata"]["deletionGracePeriodSeconds"] = 0;
  return commit(b, key, "MODIFIED", std::move(marked), current);
}

nlohmann::json ObjectStore::finalize_delete(Bucket& b, const std::string& key,
                                            nlohmann::json object, const std::string& policy) {
  nlohmann::json previous = b.objects.at(key);
  nlohmann::json deleted = commit(b, key, "DELETED", std::move(object), previous);
  collect_garbage(meta_string(deleted, "uid"), policy);
  if (b.resource.builtin && b.resource.info.plural == "namespaces") {
    delete_namespace_contents(meta_string(deleted, "name"));
  }
  return deleted;
}

void ObjectStore::collect_garbage(const std::string& owner_uid, const std::string& policy) {
  // Collect first: deleting while iterating would invalidate the maps.
  std::vector<std::pair<std::string, std::string>> dependents;  // bucket key, object key
  for (auto& [storage_key, b] : buckets_) {
    for (auto& [key, object] : b.objects) {
      if (owned_by(object, owner_uid)) dependents.emplace_back(storage_key, key);
    }
  }
  for (const auto& [storage_key, key] : dependents) {
    Bucket& b = buckets_.at(storage_key);
    auto it = b.objects.find(key);
    if (it == b.objects.end()) continue;  // already gone through another owner
    if (policy == "Orphan") {
      // Orphaning removes the reference to the deleted owner and keeps the dependent.
      nlohmann::json next = it->second;
      nlohmann::json refs = nlohmann::json::array();
      for (const nlohmann::json& ref : next["metadata"]["ownerReferences"]) {
        if (ref.value("uid", "") != owner_uid) refs.push_back(ref);
      }
      if (refs.empty()) {
        next["metadata"].erase("ownerReferences");
      } else {
        next["metadata"]["ownerReferences"] = refs;
      }
      commit(b, key, "MODIFIED", std::move(next), it->second);
    } else {
      delete_locked(b, key, "Background");
    }
  }
}

void ObjectStore::delete_namespace_contents(const std::string& ns) {
  std::vector<std::pair<std::string, std::string>> contents;
  for (auto& [storage_key, b] : buckets_) {
    if (!b.resource.info.namespaced) continue;
    for (auto& [key, object] : b.objects) {
      if (meta_string(object, "namespace") == ns) contents.emplace_back(storage_key, key);
    }
  }
  for (const auto& [storage_key, key] : contents) {
    Bucket& b = buckets_.at(storage_key);
    if (b.objects.count(key)) delete_locked(b, key, "Background");
  }
}

}  // namespace kubetune::kubefake
