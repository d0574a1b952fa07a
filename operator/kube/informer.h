// List + watch of one kind of object into a local cache, like client-go's reflector + store:
// list, then watch from the list's resourceVersion with bookmarks; on a dropped stream watch
// again from the last resourceVersion seen; on 410 Gone (history compacted) list again and
// report the differences; on errors retry with exponential back-off. Handlers run on the
// informer's thread and must be quick (they enqueue keys).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "operator/kube/client.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op::kube {

class WatchStream;

struct InformerOptions {
  std::string ns;              // "" = all namespaces
  std::string label_selector;  // e.g. "app.kubernetes.io/managed-by=kubetune-operator"
  // A label whose value list() finds objects by without a scan (client-go's indexer): the job
  // name on a job's children, so a reconcile costs the same with 10 jobs or 10,000.
  std::string index_label;
  // Drops what the controller never reads from each object before it is cached (client-go's
  // TransformFunc); metadata.managedFields are always dropped.
  std::function<void(nlohmann::json&)> trim;
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds min_backoff{100};
  std::chrono::milliseconds max_backoff{30000};
};

class Informer {
 public:
  // type: "ADDED", "MODIFIED" or "DELETED"; obj: the object (its last state for DELETED).
  using Handler = std::function<void(const std::string& type, const nlohmann::json& obj)>;

  Informer(KubeClient& client, Resource resource, InformerOptions options);
  ~Informer();

  void add_handler(Handler h);  // before start()
  void start();
  void stop();
  bool wait_for_sync(std::chrono::milliseconds timeout);
  bool has_synced() const { return synced_; }

  std::optional<nlohmann::json> get(const std::string& ns, const std::string& name) const;
  // Cached objects of namespace `ns` ("" = all) whose labels include all of `labels`; through
  // the index when `labels` names index_label and `ns` is given.
  std::vector<nlohmann::json> list(const std::string& ns,
                                   const std::map<std::string, std::string>& labels = {}) const;

  int list_count() const { return lists_; }  // full lists done (1 + relists after 410)
  int watch_count() const { return watches_; }

 private:
  // An object as the cache keeps it: its CBOR encoding (thousands of jobs and their pods, finished
  // ones too, stay cached: at 3,000 jobs the operator held 83 MiB this way, 140 MiB as parsed
  // nlohmann::json; bench/README.md), and what list() matches on. get() and list() decode what
  // they return.
  struct Cached {
    std::vector<std::uint8_t> cbor;
    std::string ns, resource_version;
    std::map<std::string, std::string> labels;

    Cached(const nlohmann::json& object, const k8s::ObjectMeta& meta);
    nlohmann::json object() const { return nlohmann::json::from_cbor(cbor); }
  };

  void run();
  void relist();
  void watch_until_closed();  // returns when the stream ends; throws ApiError on failure
  void apply(const std::string& type, const nlohmann::json& obj);
  void notify(const std::string& type, const nlohmann::json& obj);
  // The index's key of an object, or of a list()'s labels ("ns/value" of index_label); "" when
  // they have no such label.
  std::string index_key(const std::string& ns,
                        const std::map<std::string, std::string>& labels) const;
  void put_locked(const std::string& key, Cached cached);
  void erase_locked(const std::string& key);
  bool sleep_for(std::chrono::milliseconds d);  // false when stopping

  KubeClient& client_;
  Resource resource_;
  InformerOptions options_;
  std::vector<Handler> handlers_;

  mutable std::mutex mutex_;                            // guards cache_, index_, stream_
  std::map<std::string, Cached> cache_;                 // "ns/name" -> object
  std::map<std::string, std::set<std::string>> index_;  // index_key -> keys of cache_
  std::shared_ptr<WatchStream> stream_;
  std::string resource_version_;

  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> synced_{false};
  std::atomic<int> lists_{0}, watches_{0};
  std::thread thread_;
};

std::string object_key(const nlohmann::json& obj);  // "ns/name"

}  // namespace kubetune::op::kube
