#include "operator/controller/events.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "operator/controller/time_util.h"

namespace kubetune::op {

using nlohmann::json;

void EventRecorder::record(const json& involved, const std::string& type, const std::string& reason,
                           const std::string& message) {
  const json& meta = involved["metadata"];
  const std::string ns = meta.value("namespace", "default");
  const auto now = std::chrono::system_clock::now();
  json event = {{"apiVersion", "v1"},
                {"kind", "Event"},
                {"metadata", {{"generateName", meta.value("name", "") + "."}, {"namespace", ns}}},
                {"involvedObject",
                 {{"apiVersion", involved.value("apiVersion", "")},
                  {"kind", involved.value("kind", "")},
                  {"name", meta.value("name", "")},
                  {"namespace", ns},
                  {"uid", meta.value("uid", "")},
                  {"resourceVersion", meta.value("resourceVersion", "")}}},
                {"type", type},
                {"reason", reason},
                {"message", message.size() > 1024 ? message.substr(0, 1021) + "..." : message},
                {"source", {{"component", component_}}},
                {"reportingComponent", component_},
                {"firstTimestamp", format_time(now)},
                {"lastTimestamp", format_time(now)},
                {"count", 1}};
  spdlog::info("event {}/{} {} {}: {}", ns, meta.value("name", ""), type, reason, message);
  try {
    client_.create(kube::resources::kEvents.collection(ns), event);
  } catch (const std::exception& e) {
    spdlog::warn("cannot record event {}: {}", reason, e.what());
  }
}

}  // namespace kubetune::op
