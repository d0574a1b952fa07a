// Kubernetes Events (core/v1) about a FineTuneJob: `kubectl describe ftj` shows them. Recording
// is best effort and never slows a reconcile, as client-go's event broadcaster: record() queues
// the event and returns; a thread of the recorder posts it through a client of its own (so its
// own share of the client-side rate limit: controller-runtime's recorder works the same way).
// When the API server falls behind, events beyond kMaxPending are dropped and counted, never
// waited for. A failed POST is logged.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "operator/kube/client.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op {

class EventRecorder {
 public:
  // client-go's broadcaster drops beyond 1000 queued events too.
  static constexpr size_t kMaxPending = 1000;
  static constexpr std::chrono::seconds kDrainTime{3};  // posting what is left when stopping
  static constexpr std::chrono::seconds kRequestTimeout{5};

  explicit EventRecorder(std::unique_ptr<kube::KubeClient> client,
                         std::string component = "kubetune-operator");
  ~EventRecorder();  // posts what is queued (for kDrainTime at most, plus one request), then stops

  // type: "Normal" or "Warning"; `involved` is the object the event is about.
  void record(const nlohmann::json& involved, const std::string& type, const std::string& reason,
              const std::string& message);

  // The operator's client settings for the recorder's own client: requests bounded by
  // kRequestTimeout, so that stopping waits at most kDrainTime + kRequestTimeout.
  static kube::ClientConfig client_config(kube::ClientConfig operator_config);

  kube::KubeClient& client() { return *client_; }

 private:
  void run();

  std::unique_ptr<kube::KubeClient> client_;
  std::string component_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<k8s::Event> pending_;
  size_t dropped_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kubetune::op
