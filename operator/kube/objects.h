// Readers of the generated Kubernetes types (operator/kube/kube_types.h, from the API server's
// OpenAPI documents) that several parts of the operator need. The REST client and the informers
// carry objects as JSON, as client-go's dynamic client does; everything that reads or writes a
// field converts to the kind's type first (`json.get<k8s::Pod>()`), so a misspelt field is a
// compile error, not a silent default.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "operator/kube/kube_types.h"

namespace kubetune::op::kube {

// The type and metadata of an object of any kind.
inline k8s::ObjectMeta metadata_of(const nlohmann::json& object) {
  return object.get<k8s::PartialObjectMetadata>().metadata;
}

// "" when absent.
inline std::string label(const k8s::ObjectMeta& meta, const std::string& key) {
  const auto it = meta.labels.find(key);
  return it == meta.labels.end() ? "" : it->second;
}
inline std::string annotation(const k8s::ObjectMeta& meta, const std::string& key) {
  const auto it = meta.annotations.find(key);
  return it == meta.annotations.end() ? "" : it->second;
}

// deletionTimestamp set: the object is going (finalizers or a grace period hold it).
inline bool being_deleted(const k8s::ObjectMeta& meta) {
  return meta.deletion_timestamp.has_value();
}

inline std::string name_of(const k8s::ObjectMeta& meta) { return meta.name.value_or(""); }
inline std::string uid_of(const k8s::ObjectMeta& meta) { return meta.uid.value_or(""); }

}  // namespace kubetune::op::kube
