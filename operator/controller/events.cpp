#include "operator/controller/events.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>

#include "operator/kube/kube_types.h"
#include "operator/kube/objects.h"
#include "operator/policy/time_util.h"

namespace kubetune::op {

using nlohmann::json;

namespace {

// The event's involvedObject: every member written, "" where the object has none.
k8s::ObjectReference reference_to(const k8s::PartialObjectMetadata& object, const std::string& ns) {
  k8s::ObjectReference ref;
  ref.api_version = object.api_version.value_or("");
  ref.kind = object.kind.value_or("");
  ref.name = kube::name_of(object.metadata);
  ref.namespace_ = ns;
  ref.uid = kube::uid_of(object.metadata);
  ref.resource_version = object.metadata.resource_version.value_or("");
  return ref;
}

}  // namespace

EventRecorder::EventRecorder(std::unique_ptr<kube::KubeClient> client, std::string component)
    : client_(std::move(client)), component_(std::move(component)) {
  thread_ = std::thread([this] { run(); });
}

EventRecorder::~EventRecorder() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

kube::ClientConfig EventRecorder::client_config(kube::ClientConfig operator_config) {
  operator_config.request_timeout = kRequestTimeout;
  return operator_config;
}

void EventRecorder::record(const json& involved, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const auto object = involved.get<k8s::PartialObjectMetadata>();
  const std::string name = kube::name_of(object.metadata);
  const std::string ns = object.metadata.namespace_.value_or("default");
  const std::string now = format_time(std::chrono::system_clock::now());
  k8s::Event event;
  event.api_version = "v1";
  event.kind = "Event";
  event.metadata.generate_name = name + ".";
  event.metadata.namespace_ = ns;
  event.involved_object = reference_to(object, ns);
  event.type = type;
  event.reason = reason;
  event.message = message.size() > 1024 ? message.substr(0, 1021) + "..." : message;
  event.source.component = component_;
  event.reporting_component = component_;
  event.first_timestamp = now;
  event.last_timestamp = now;
  event.count = 1;
  spdlog::info("event {}/{} {} {}: {}", ns, name, type, reason, message);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.size() >= kMaxPending) {
      if (dropped_++ % kMaxPending == 0) {
        spdlog::warn("{} events wait for the API server; dropping new ones ({} so far)",
                     pending_.size(), dropped_);
      }
      return;
    }
    pending_.push_back(std::move(event));
  }
  wake_.notify_one();
}

void EventRecorder::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::optional<std::chrono::steady_clock::time_point> give_up;
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopping, everything posted
    // Stopping: what the next few seconds can post, not a shutdown held by a server that is gone.
    if (stopping_ && !give_up) give_up = std::chrono::steady_clock::now() + kDrainTime;
    if (give_up && std::chrono::steady_clock::now() > *give_up) {
      spdlog::warn("stopping: {} events not recorded", pending_.size());
      return;
    }
    k8s::Event event = std::move(pending_.front());
    pending_.pop_front();
    lock.unlock();
    try {
      client_->create(kube::resources::kEvents.collection(event.metadata.namespace_.value_or("")),
                      event);
    } catch (const std::exception& e) {
      spdlog::warn("cannot record event {}: {}", event.reason.value_or(""), e.what());
    }
    lock.lock();
  }
}

}  // namespace kubetune::op
