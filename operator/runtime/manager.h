// Wires the operator together: API client, informers for FineTuneJobs and the pods the operator
// made, the work queue and its workers running JobReconciler, leader election, and the HTTP
// endpoint with /metrics, /healthz and /readyz.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "operator/controller/reconciler.h"
#include "operator/kube/client_config.h"
#include "operator/kube/informer.h"
#include "operator/runtime/leader_election.h"
#include "operator/runtime/work_queue.h"

namespace kubetune::metrics {
class HttpEndpoint;
}

namespace kubetune::op {

struct ManagerOptions {
  std::string watch_namespace;  // "" = all namespaces
  int workers = 2;              // reconciles in parallel (never two for one job)
  bool leader_elect = true;
  LeaderElectionConfig leader;
  std::string http_address = "127.0.0.1";  // in a pod: its IP (the chart passes status.podIP)
  int http_port = 8080;                    // /metrics, /healthz, /readyz; -1 = none
  ReconcilerOptions reconciler;
  kube::InformerOptions informer;  // back-off and timeouts (namespace/selector are set here)
  std::chrono::milliseconds queue_base_delay{5};
  std::chrono::milliseconds queue_max_delay{60000};
};

class Manager {
 public:
  Manager(kube::ClientConfig config, ManagerOptions options);
  ~Manager();

  void start();  // returns at once; campaigns for the lease in the background
  // Stops everything; `release_lease` false leaves the lease to expire (a crash, for tests).
  // Safe from any thread and more than once: every caller returns only when all threads of the
  // manager have been joined.
  void stop(bool release_lease = true);
  // Blocks until stop(), lost leadership or a fatal error; says which.
  enum class Ended { kStopped, kLostLeadership, kFatal };
  Ended wait();
  // Why the manager cannot go on (e.g. no permission on its Lease); empty otherwise.
  std::string fatal_error() const;

  bool is_leader() const { return leading_; }
  bool ready() const;
  int http_port() const;
  OperatorMetrics& metrics() { return *metrics_; }
  kube::KubeClient& client() { return *client_; }
  // For tests and diagnostics; null before this replica leads.
  const kube::Informer* job_informer() const { return jobs_.get(); }

 private:
  void run_election();
  void start_controllers();
  void stop_controllers();
  void worker_loop();
  void enqueue_owner(const nlohmann::json& child);
  // Whether Kueue's Workloads can be listed here (Kueue installed and the RBAC to read them).
  bool kueue_served();

  ManagerOptions options_;
  std::unique_ptr<kube::KubeClient> client_;
  std::unique_ptr<OperatorMetrics> metrics_;
  std::unique_ptr<EventRecorder> events_;
  std::unique_ptr<kube::Informer> jobs_, pods_;
  std::unique_ptr<kube::Informer> workloads_;  // null where the cluster serves no Kueue
  std::unique_ptr<WorkQueue> queue_;
  std::unique_ptr<JobReconciler> reconciler_;
  std::unique_ptr<LeaderElector> elector_;
  std::unique_ptr<metrics::HttpEndpoint> http_;
  std::vector<std::thread> workers_;
  std::thread election_thread_;
  std::atomic<bool> leading_{false}, controllers_running_{false}, stopped_{false};
  std::atomic<bool> lost_leadership_{false};
  mutable std::mutex mutex_;  // guards fatal_error_ and the waits on done_
  std::string fatal_error_;
  std::condition_variable done_;
  std::mutex stop_mutex_;  // held for the whole of stop(): a second caller waits for the first
};

}  // namespace kubetune::op
