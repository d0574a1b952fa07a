#include "operator/runtime/leader_election.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <stdexcept>

#include "operator/kube/kube_types.h"
#include "operator/policy/time_util.h"

namespace kubetune::op {

using Steady = std::chrono::steady_clock;

namespace {

// The Lease of a first candidate: it holds it from `now`.
k8s::Lease fresh_lease(const LeaderElectionConfig& config, int duration_s, const std::string& now) {
  k8s::Lease lease;
  lease.api_version = "coordination.k8s.io/v1";
  lease.kind = "Lease";
  lease.metadata.name = config.lease_name;
  lease.metadata.namespace_ = config.lease_namespace;
  lease.spec.holder_identity = config.identity;
  lease.spec.lease_duration_seconds = duration_s;
  lease.spec.acquire_time = now;
  lease.spec.renew_time = now;
  lease.spec.lease_transitions = 0;
  return lease;
}

}  // namespace

LeaderElector::LeaderElector(kube::KubeClient& client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

bool LeaderElector::wait(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, d, [this] { return stopping_.load(); });
  return !stopping_;
}

void LeaderElector::run(const std::function<void()>& on_started_leading,
                        const std::function<void()>& on_stopped_leading) {
  // Campaign.
  while (!stopping_) {
    bool acquired = false;
    try {
      acquired = try_acquire_or_renew();
      lease_readable_ = true;
    } catch (const kube::ApiError& e) {
      lease_readable_ = false;
      if (e.code() == 401 || e.code() == 403) {
        throw std::runtime_error(
            "leader election: no access to Lease " + config_.lease_namespace + "/" +
            config_.lease_name + " (" + e.what() +
            "); run with --lease-namespace set to a namespace where this identity may get, "
            "create and update leases (the chart's RBAC grants its release namespace)");
      }
      spdlog::warn("leader election: {}", e.what());
    } catch (const std::exception& e) {
      lease_readable_ = false;
      spdlog::warn("leader election: {}", e.what());
    }
    if (acquired) break;
    if (!wait(config_.retry_period)) return;
  }
  if (stopping_) return;
  leader_ = true;
  spdlog::info("{} became the leader (lease {}/{})", config_.identity, config_.lease_namespace,
               config_.lease_name);
  on_started_leading();
  // Renew; give up when renewals keep failing for renew_deadline.
  auto last_renew = Steady::now();
  while (wait(config_.retry_period)) {
    bool renewed = false;
    try {
      renewed = try_acquire_or_renew();
    } catch (const std::exception& e) {
      spdlog::warn("leader election: renew failed: {}", e.what());
    }
    if (renewed) {
      last_renew = Steady::now();
    } else if (Steady::now() - last_renew > config_.renew_deadline) {
      spdlog::error("{} lost the leader lease", config_.identity);
      break;
    }
  }
  // Stop reconciling before a successor may start.
  leader_ = false;
  on_stopped_leading();
  if (stopping_ && release_on_stop_) release();
}

void LeaderElector::stop(bool release) {
  release_on_stop_ = release;
  stopping_ = true;
  cv_.notify_all();
}

bool LeaderElector::try_acquire_or_renew() {
  const auto lease_path =
      kube::resources::kLeases.item(config_.lease_namespace, config_.lease_name);
  const std::string now = format_micro_time(std::chrono::system_clock::now());
  const int duration_s = static_cast<int>(std::ceil(config_.lease_duration.count() / 1000.0));
  k8s::Lease lease;
  try {
    lease = client_.get(lease_path).get<k8s::Lease>();
  } catch (const kube::ApiError& e) {
    if (!e.not_found()) throw;
    try {
      client_.create(kube::resources::kLeases.collection(config_.lease_namespace),
                     fresh_lease(config_, duration_s, now));
      return true;
    } catch (const kube::ApiError& ce) {
      if (ce.already_exists() || ce.conflict()) return false;
      throw;
    }
  }
  k8s::LeaseSpec& spec = lease.spec;
  const std::string holder = spec.holder_identity.value_or("");
  if (!holder.empty() && holder != config_.identity) {
    const std::string version = lease.metadata.resource_version.value_or("");
    if (version != observed_version_) {
      observed_version_ = version;
      observed_at_ = Steady::now();
    }
    const auto held_for = std::chrono::seconds(spec.lease_duration_seconds.value_or(duration_s));
    if (Steady::now() < observed_at_ + held_for) return false;  // the holder is alive
  }
  if (holder != config_.identity) {
    spec.acquire_time = now;
    spec.lease_transitions = spec.lease_transitions.value_or(0) + (holder.empty() ? 0 : 1);
  }
  spec.holder_identity = config_.identity;
  spec.lease_duration_seconds = duration_s;
  spec.renew_time = now;
  try {
    client_.update(lease_path, lease);  // carries the resourceVersion: 409 if someone won
    return true;
  } catch (const kube::ApiError& e) {
    if (e.conflict()) return false;
    throw;
  }
}

void LeaderElector::release() {
  const auto lease_path =
      kube::resources::kLeases.item(config_.lease_namespace, config_.lease_name);
  try {
    auto lease = client_.get(lease_path).get<k8s::Lease>();
    if (lease.spec.holder_identity.value_or("") != config_.identity) return;
    lease.spec.holder_identity = "";
    lease.spec.lease_duration_seconds = 1;
    lease.spec.renew_time = format_micro_time(std::chrono::system_clock::now());
    client_.update(lease_path, lease);
    spdlog::info("released the lease {}/{}", config_.lease_namespace, config_.lease_name);
  } catch (const std::exception& e) {
    spdlog::error("leader election: cannot release the lease: {}", e.what());
  }
}

}  // namespace kubetune::op
