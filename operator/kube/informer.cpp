#include "operator/kube/informer.h"

#include <spdlog/spdlog.h>

#include "operator/kube/objects.h"
#include "operator/kube/watch_stream.h"

namespace kubetune::op::kube {

using nlohmann::json;

namespace {

std::string key_of(const k8s::ObjectMeta& meta) {
  return meta.namespace_.value_or("") + "/" + name_of(meta);
}

// "" when absent.
std::string version_of(const k8s::ObjectMeta& meta) { return meta.resource_version.value_or(""); }

using Labels = std::map<std::string, std::string>;

// Whether `have` includes every label of `want`.
bool has_labels(const Labels& have, const Labels& want) {
  for (const auto& [key, value] : want) {
    const auto it = have.find(key);
    if (it == have.end() || it->second != value) return false;
  }
  return true;
}

// What the cache keeps of an object: all of it but metadata.managedFields, the server's record of
// who set which field, which the operator never reads and which is close to half of a pod's or a
// job's bytes. (An update that omits them leaves them as they are on the server.)
json cached_form(json obj, const std::function<void(json&)>& trim) {
  json& meta = obj.at("metadata");  // json: every object the API serves has metadata
  if (meta.is_object()) meta.erase("managedFields");  // json: the server's bookkeeping, not read
  if (trim) trim(obj);
  return obj;
}

// A watch's ERROR event carries a Status (410 Gone when our resourceVersion is compacted away).
ApiError watch_error(const json& object) {
  const auto status = object.get<k8s::Status>();
  return ApiError(status.code.value_or(0), status.reason.value_or(""),
                  "watch error: " + status.message.value_or(""));
}

}  // namespace

std::string object_key(const json& obj) { return key_of(metadata_of(obj)); }

Informer::Informer(KubeClient& client, Resource resource, InformerOptions options)
    : client_(client), resource_(std::move(resource)), options_(std::move(options)) {}

Informer::~Informer() { stop(); }

void Informer::add_handler(Handler h) { handlers_.push_back(std::move(h)); }

void Informer::start() {
  thread_ = std::thread([this] { run(); });
}

void Informer::stop() {
  stopping_ = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stream_) stream_->cancel();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool Informer::wait_for_sync(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!synced_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return synced_;
}

bool Informer::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait_for(lock, d, [this] { return stopping_.load(); });
  return !stopping_;
}

void Informer::run() {
  auto backoff = options_.min_backoff;
  bool need_list = true;
  while (!stopping_) {
    try {
      if (need_list) relist();
      need_list = false;
      watch_until_closed();
      backoff = options_.min_backoff;  // a healthy stream resets the back-off
    } catch (const ApiError& e) {
      if (stopping_) break;
      if (e.gone()) {
        need_list = true;  // our resourceVersion is too old: start over from a fresh list
        spdlog::info("informer {}: resourceVersion {} expired (410 Gone); listing again",
                     resource_.plural, resource_version_);
        continue;
      }
      spdlog::warn("informer {}: {}; retrying in {} ms", resource_.plural, e.what(),
                   backoff.count());
      if (!sleep_for(backoff)) break;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

Informer::Cached::Cached(const json& object, const k8s::ObjectMeta& meta)
    : cbor(json::to_cbor(object)),
      ns(meta.namespace_.value_or("")),
      resource_version(version_of(meta)),
      labels(meta.labels) {}

void Informer::relist() {
  const auto list = client_.list(resource_.collection(options_.ns), options_.label_selector)
                        .get<k8s::PartialObjectMetadataList>();
  ++lists_;
  std::map<std::string, std::pair<json, k8s::ObjectMeta>> fresh;
  // An item converted back to JSON is the object as listed: its unknown_fields keep the rest.
  for (const auto& item : list.items) {
    json object = cached_form(item, options_.trim);
    k8s::ObjectMeta meta = metadata_of(object);
    const std::string key = key_of(meta);  // before the move below (assignment's right side first)
    fresh[key] = {std::move(object), std::move(meta)};
  }
  // Report what changed while we were not watching, as a watch would have.
  std::vector<std::pair<std::string, json>> changes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, cached] : cache_) {
      if (!fresh.count(key)) changes.emplace_back("DELETED", cached.object());
    }
    for (const auto& [key, listed] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        changes.emplace_back("ADDED", listed.first);
      } else if (it->second.resource_version != version_of(listed.second)) {
        changes.emplace_back("MODIFIED", listed.first);
      }
    }
    cache_.clear();
    index_.clear();
    for (const auto& [key, listed] : fresh) put_locked(key, Cached(listed.first, listed.second));
    resource_version_ = list.metadata.resource_version.value_or("");
  }
  synced_ = true;
  for (const auto& [type, obj] : changes) notify(type, obj);
}

void Informer::watch_until_closed() {
  std::shared_ptr<WatchStream> stream =
      client_.watch(resource_.collection(options_.ns), resource_version_, options_.label_selector,
                    options_.watch_timeout_seconds);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stream_ = stream;
  }
  ++watches_;
  json event;
  while (!stopping_ && stream->next(event)) {
    const auto watched = event.get<k8s::WatchEvent>();
    if (watched.type == "ERROR") throw watch_error(watched.object);
    if (watched.type == "BOOKMARK") {
      const k8s::ObjectMeta meta = metadata_of(watched.object);
      std::lock_guard<std::mutex> lock(mutex_);
      resource_version_ = meta.resource_version.value_or(resource_version_);
      continue;
    }
    apply(watched.type, watched.object);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stream_.reset();
}

void Informer::apply(const std::string& type, const json& watched) {
  const json obj = cached_form(watched, options_.trim);
  const k8s::ObjectMeta meta = metadata_of(obj);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (type == "DELETED") {
      erase_locked(key_of(meta));
    } else {
      put_locked(key_of(meta), Cached(obj, meta));
    }
    resource_version_ = meta.resource_version.value_or(resource_version_);
  }
  notify(type, obj);
}

void Informer::notify(const std::string& type, const json& obj) {
  for (const auto& h : handlers_) h(type, obj);
}

std::string Informer::index_key(const std::string& ns, const Labels& labels) const {
  if (options_.index_label.empty()) return "";
  const auto it = labels.find(options_.index_label);
  return it == labels.end() || it->second.empty() ? "" : ns + "/" + it->second;
}

void Informer::put_locked(const std::string& key, Cached cached) {
  erase_locked(key);  // its labels may have changed
  const std::string indexed = index_key(cached.ns, cached.labels);
  if (!indexed.empty()) index_[indexed].insert(key);
  cache_.insert_or_assign(key, std::move(cached));
}

void Informer::erase_locked(const std::string& key) {
  auto it = cache_.find(key);
  if (it == cache_.end()) return;
  const std::string indexed = index_key(it->second.ns, it->second.labels);
  if (auto entry = index_.find(indexed); entry != index_.end()) {
    entry->second.erase(key);
    if (entry->second.empty()) index_.erase(entry);
  }
  cache_.erase(it);
}

std::optional<json> Informer::get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(ns + "/" + name);
  if (it == cache_.end()) return std::nullopt;
  return it->second.object();
}

std::vector<json> Informer::list(const std::string& ns,
                                 const std::map<std::string, std::string>& labels) const {
  std::vector<json> out;
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string indexed = ns.empty() ? "" : index_key(ns, labels);
  if (!indexed.empty()) {
    const auto entry = index_.find(indexed);
    if (entry == index_.end()) return out;
    for (const std::string& key : entry->second) {
      const Cached& cached = cache_.at(key);  // the index holds only keys of cache_
      if (has_labels(cached.labels, labels)) out.push_back(cached.object());
    }
    return out;
  }
  for (const auto& [key, cached] : cache_) {
    if (!ns.empty() && cached.ns != ns) continue;
    if (has_labels(cached.labels, labels)) out.push_back(cached.object());
  }
  return out;
}

}  // namespace kubetune::op::kube
