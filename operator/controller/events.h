// Kubernetes Events (core/v1) about a FineTuneJob: `kubectl describe ftj` shows them. Recording
// is best effort: a failed POST is logged and never fails a reconcile.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "operator/kube/client.h"

namespace kubetune::op {

class EventRecorder {
 public:
  explicit EventRecorder(kube::KubeClient& client, std::string component = "kubetune-operator")
      : client_(client), component_(std::move(component)) {}

  // type: "Normal" or "Warning"; `involved` is the object the event is about.
  void record(const nlohmann::json& involved, const std::string& type, const std::string& reason,
              const std::string& message);

 private:
  kube::KubeClient& client_;
  std::string component_;
};

}  // namespace kubetune::op
