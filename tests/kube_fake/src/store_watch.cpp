// Commits, the event history, and watches: every write gets the next global resourceVersion and
// one history event; open watches get the events that match their filters.
#include "api_error.h"
#include "object_meta.h"
#include "object_store.h"

namespace kubetune::kubefake {
namespace {

std::string event_line(const std::string& type, const nlohmann::json& object) {
  return nlohmann::json{{"type", type}, {"object", object}}.dump() + "\n";
}

}  // namespace

nlohmann::json ObjectStore::commit(Bucket& b, const std::string& key, const std::string& type,
                                   nlohmann::json object, nlohmann::json previous) {
  uint64_t rv = ++rv_;
  meta(object)["resourceVersion"] = std::to_string(rv);
  if (type == "DELETED") {
    b.objects.erase(key);
  } else {
    b.objects[key] = object;
  }
  history_.push_back(Event{rv, type, b.resource.storage_key(), object, std::move(previous)});
  notify(history_.back());
  trim_history();
  return object;
}

void ObjectStore::trim_history() {
  while (history_.size() > history_limit_) {
    compacted_rv_ = history_.front().rv;
    history_.pop_front();
  }
}

// What `watcher` sees of `event`: like the apiserver, an object that starts or stops matching
// the selectors shows up as ADDED or DELETED. "" when the watcher sees nothing.
std::string ObjectStore::event_line_for(const Watcher& watcher, const Event& event) const {
  if (event.storage_key != watcher.storage_key || event.rv <= watcher.after_rv) return "";
  auto visible = [&watcher](const nlohmann::json& object) {
    return object.is_object() &&
           (watcher.ns.empty() || meta_string(object, "namespace") == watcher.ns) &&
           watcher.labels.matches(object);
  };
  bool was = visible(event.previous);
  bool now = visible(event.object);
  if (event.type == "DELETED") return was || now ? event_line("DELETED", event.object) : "";
  if (was && now) return event_line(event.type, event.object);
  if (now) return event_line("ADDED", event.object);
  if (was) return event_line("DELETED", event.object);
  return "";
}

void ObjectStore::notify(const Event& event) {
  auto it = watchers_.begin();
  while (it != watchers_.end()) {
    if (it->queue->closed()) {
      it = watchers_.erase(it);
      continue;
    }
    std::string line = event_line_for(*it, event);
    if (line.empty()) {
      it->queue->advance(event.rv);
    } else {
      it->queue->push(std::move(line), event.rv);
    }
    ++it;
  }
}

std::shared_ptr<WatchQueue> ObjectStore::watch(const Resource& resource, const std::string& ns,
                                               const WatchOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  auto queue = std::make_shared<WatchQueue>();
  Watcher watcher{resource.storage_key(), ns, options.labels, 0, queue};
  const std::string& rv_text = options.resource_version;
  bool initial_state = rv_text.empty() || rv_text == "0";
  if (initial_state) {
    // "Get state and start at most recent": synthetic ADDED events for what exists now.
    for (const auto& [key, object] : bucket(resource).objects) {
      Event added{rv_, "ADDED", watcher.storage_key, object, nullptr};
      std::string line = event_line_for(watcher, added);
      if (!line.empty()) queue->push(std::move(line), rv_);
    }
    watcher.after_rv = rv_;
  } else {
    uint64_t from = parse_resource_version(rv_text);
    if (from < compacted_rv_) {
      // The apiserver answers 200 and a single ERROR event, then ends the stream.
      nlohmann::json status = expired("too old resource version: " + rv_text + " (" +
                                      std::to_string(compacted_rv_) + ")")
                                  .status();
      queue->push(event_line("ERROR", status), rv_);
      queue->close();
      return queue;
    }
    watcher.after_rv = from;
    for (const Event& event : history_) {
      std::string line = event_line_for(watcher, event);
      if (!line.empty()) queue->push(std::move(line), event.rv);
    }
  }
  queue->advance(rv_);
  watchers_.push_back(std::move(watcher));
  return queue;
}

void ObjectStore::set_history_limit(size_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  history_limit_ = limit;
  trim_history();
}

void ObjectStore::compact_now() {
  std::lock_guard<std::mutex> lock(mu_);
  history_.clear();
  compacted_rv_ = rv_;
}

void ObjectStore::close_watches() {
  std::lock_guard<std::mutex> lock(mu_);
  for (Watcher& watcher : watchers_) watcher.queue->close();
  watchers_.clear();
}

}  // namespace kubetune::kubefake
