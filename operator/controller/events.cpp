#include "operator/controller/events.h"

#include <spdlog/spdlog.h>

#include <chrono>

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
  try {
    client_.create(kube::resources::kEvents.collection(ns), event);
  } catch (const std::exception& e) {
    spdlog::warn("cannot record event {}: {}", reason, e.what());
  }
}

}  // namespace kubetune::op
