#pragma once
// The fake's etcd + registry: objects by resource, one global resourceVersion counter, the event
// history that watches replay from, the open watches, and the create/update/delete semantics
// (optimistic concurrency, status subresource, generation, finalizers, garbage collection).
// One mutex guards everything; watch streams only receive serialized lines through WatchQueues.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "resource_registry.h"
#include "selectors.h"
#include "watch_queue.h"

namespace kubetune::kubefake {

struct ListOptions {
  LabelSelector labels;
  std::string resource_version;  // "" = most recent; any other: validated, the newest is served
};

struct WatchOptions {
  LabelSelector labels;
  std::string resource_version;  // "" or "0": start with ADDED events for the current state
  bool bookmarks = false;
};

struct DeleteOptions {
  std::string propagation_policy;  // "Orphan" keeps dependents; anything else deletes them
  std::string precondition_uid;
  std::string precondition_resource_version;
};

class ObjectStore {
 public:
  // Each method throws ApiError with the apiserver's code and reason when the request fails.
  nlohmann::json create(const Resource& resource, const std::string& ns, nlohmann::json body);
  nlohmann::json get(const Resource& resource, const std::string& ns, const std::string& name);
  nlohmann::json list(const Resource& resource, const std::string& ns, const ListOptions& options);
  nlohmann::json replace(const Resource& resource, const std::string& ns, const std::string& name,
                         nlohmann::json body);
  nlohmann::json replace_status(const Resource& resource, const std::string& ns,
                                const std::string& name, const nlohmann::json& body);
  nlohmann::json patch(const Resource& resource, const std::string& ns, const std::string& name,
                       const std::string& content_type, const std::string& patch_body,
                       bool status_subresource);
  nlohmann::json remove(const Resource& resource, const std::string& ns, const std::string& name,
                        const DeleteOptions& options);
  // The queue already holds the initial/replayed events (or a single 410 ERROR event, closed).
  std::shared_ptr<WatchQueue> watch(const Resource& resource, const std::string& ns,
                                    const WatchOptions& options);

  void set_history_limit(size_t limit);
  void compact_now();
  void close_watches();

 private:
  struct Bucket {
    Resource resource;
    std::map<std::string, nlohmann::json> objects;  // "namespace/name", sorted like etcd keys
  };
  struct Event {
    uint64_t rv;
    std::string type;  // ADDED, MODIFIED, DELETED
    std::string storage_key;
    nlohmann::json object;    // state after the change (for DELETED: last state, new RV)
    nlohmann::json previous;  // state before (null for ADDED)
  };
  struct Watcher {
    std::string storage_key;
    std::string ns;  // "" = all namespaces
    LabelSelector labels;
    uint64_t after_rv;  // only events newer than this
    std::shared_ptr<WatchQueue> queue;
  };

  Bucket& bucket(const Resource& resource);
  nlohmann::json& existing(const Resource& resource, const std::string& ns,
                           const std::string& name);
  nlohmann::json commit(Bucket& bucket, const std::string& key, const std::string& type,
                        nlohmann::json object, nlohmann::json previous);
  nlohmann::json replace_locked(const Resource& resource, const std::string& ns,
                                const std::string& name, nlohmann::json body);
  nlohmann::json replace_status_locked(const Resource& resource, const std::string& ns,
                                       const std::string& name, const nlohmann::json& body);
  nlohmann::json finish_update(Bucket& bucket, const std::string& key,
                               const nlohmann::json& current, nlohmann::json next);
  nlohmann::json delete_locked(Bucket& bucket, const std::string& key, const std::string& policy);
  nlohmann::json finalize_delete(Bucket& bucket, const std::string& key, nlohmann::json object,
                                 const std::string& policy);
  void collect_garbage(const std::string& owner_uid, const std::string& policy);
  void delete_namespace_contents(const std::string& ns);
  void notify(const Event& event);
  std::string event_line_for(const Watcher& watcher, const Event& event) const;
  void trim_history();

  std::mutex mu_;
  uint64_t rv_ = 1;  // the resourceVersion of the last write
  std::map<std::string, Bucket> buckets_;
  std::deque<Event> history_;
  size_t history_limit_ = 100000;
  uint64_t compacted_rv_ = 0;  // watches from an RV older than this get 410
  std::vector<Watcher> watchers_;
};

}  // namespace kubetune::kubefake
