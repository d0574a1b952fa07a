#include "operator/kube/informer.h"

#include <spdlog/spdlog.h>

#include "operator/kube/watch_stream.h"

namespace kubetune::op::kube {

using nlohmann::json;

std::string object_key(const json& obj) {
  const json& m = obj.at("metadata");
  return m.value("namespace", "") + "/" + m.value("name", "");
}

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
        continue;
      }
      spdlog::warn("informer {}: {}; retrying in {} ms", resource_.plural, e.what(),
                   backoff.count());
      if (!sleep_for(backoff)) break;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

void Informer::relist() {
  json list = client_.list(resource_.collection(options_.ns), options_.label_selector);
  ++lists_;
  std::map<std::string, json> fresh;
  for (auto& item : list.value("items", json::array())) fresh[object_key(item)] = item;
  // Report what changed while we were not watching, as a watch would have.
  std::vector<std::pair<std::string, json>> changes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [key, obj] : cache_) {
      if (!fresh.count(key)) changes.emplace_back("DELETED", obj);
    }
    for (const auto& [key, obj] : fresh) {
      auto it = cache_.find(key);
      if (it == cache_.end()) {
        changes.emplace_back("ADDED", obj);
      } else if (it->second["metadata"].value("resourceVersion", "") !=
                 obj["metadata"].value("resourceVersion", "")) {
        changes.emplace_back("MODIFIED", obj);
      }
    }
    cache_ = std::move(fresh);
    resource_version_ = list["metadata"].value("resourceVersion", "");
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
    const std::string type = event.value("type", "");
    const json& obj = event["object"];
    if (type == "ERROR") {
      const int code = obj.value("code", 0);
      throw ApiError(code, obj.value("reason", ""), "watch error: " + obj.value("message", ""));
    }
    if (type == "BOOKMARK") {
      std::lock_guard<std::mutex> lock(mutex_);
      resource_version_ = obj["metadata"].value("resourceVersion", resource_version_);
      continue;
    }
    apply(type, obj);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stream_.reset();
}

void Informer::apply(const std::string& type, const json& obj) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (type == "DELETED") {
      cache_.erase(object_key(obj));
    } else {
      cache_[object_key(obj)] = obj;
    }
    resource_version_ = obj["metadata"].value("resourceVersion", resource_version_);
  }
  notify(type, obj);
}

void Informer::notify(const std::string& type, const json& obj) {
  for (const auto& h : handlers_) h(type, obj);
}

std::optional<json> Informer::get(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(ns + "/" + name);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> Informer::list(const std::string& ns,
                                 const std::map<std::string, std::string>& labels) const {
  std::vector<json> out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [key, obj] : cache_) {
    const json& meta = obj["metadata"];
    if (!ns.empty() && meta.value("namespace", "") != ns) continue;
    const json obj_labels = meta.value("labels", json::object());
    bool match = true;
    for (const auto& [k, v] : labels) match = match && obj_labels.value(k, "") == v;
    if (match) out.push_back(obj);
  }
  return out;
}

}  // namespace kubetune::op::kube
