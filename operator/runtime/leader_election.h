// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection: only the
// holder reconciles. The holder renews every retry_period; a candidate takes the lease over when
// it has not seen it renewed for lease_duration (measured on its own clock, from when it saw the
// record change, so clock skew between nodes does not matter). A leader that cannot renew within
// renew_deadline steps down. stop() releases the lease so a successor need not wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>

#include "operator/kube/client.h"

namespace kubetune::op {

struct LeaderElectionConfig {
  std::string lease_namespace = "default";
  std::string lease_name = "kubetune-operator";
  std::string identity;  // unique per replica (pod name + random suffix)
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
};

class LeaderElector {
 public:
  LeaderElector(kube::KubeClient& client, LeaderElectionConfig config);

  // Blocks: campaigns until leading, calls on_started_leading, renews until stop() or until
  // leadership is lost, then calls on_stopped_leading (if it was leading) and returns. Throws
  // when the API server forbids access to the lease: waiting cannot fix RBAC.
  void run(const std::function<void()>& on_started_leading,
           const std::function<void()>& on_stopped_leading);
  // Makes run() return; the lease is released if held and `release` is true.
  void stop(bool release = true);
  bool is_leader() const { return leader_; }
  // False while the last attempt to read or write the lease failed (standby /readyz).
  bool lease_readable() const { return lease_readable_; }

 private:
  bool try_acquire_or_renew();
  void release();
  bool wait(std::chrono::milliseconds d);  // false when stopping

  kube::KubeClient& client_;
  LeaderElectionConfig config_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> release_on_stop_{true};
  std::atomic<bool> lease_readable_{true};
  std::mutex mutex_;
  std::condition_variable cv_;
  // What we last saw of someone else's lease, and when (steady clock) we saw it change.
  std::string observed_version_;
  std::chrono::steady_clock::time_point observed_at_;
};

}  // namespace kubetune::op
