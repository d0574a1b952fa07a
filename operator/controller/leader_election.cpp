#include "operator/controller/leader_election.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <stdexcept>

#include "operator/controller/time_util.h"

namespace kubetune::op {

using nlohmann::json;
using Steady = std::chrono::steady_clock;

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
  json lease;
  try {
    lease = client_.get(lease_path);
  } catch (const kube::ApiError& e) {
    if (!e.not_found()) throw;
    json fresh = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", duration_s},
          {"acquireTime", now},
          {"renewTime", now},
          {"leaseTransitions", 0}}}};
    try {
      client_.create(kube::resources::kLeases.collection(config_.lease_namespace), fresh);
      return true;
    } catch (const kube::ApiError& ce) {
      if (ce.already_exists() || ce.conflict()) return false;
      throw;
    }
  }
  json spec = lease.value("spec", json::object());
  const std::string holder = spec.value("holderIdentity", "");
  if (!holder.empty() && holder != config_.identity) {
    const std::string version = lease["metadata"].value("resourceVersion", "");
    if (version != observed_version_) {
      observed_version_ = version;
      observed_at_ = Steady::now();
    }
    const auto held_for = std::chrono::seconds(spec.value("leaseDurationSeconds", duration_s));
    if (Steady::now() < observed_at_ + held_for) return false;  // the holder is alive
  }
  if (holder != config_.identity) {
    spec["acquireTime"] = now;
    spec["leaseTransitions"] = spec.value("leaseTransitions", 0) + (holder.empty() ? 0 : 1);
  }
  spec["holderIdentity"] = config_.identity;
  spec["leaseDurationSeconds"] = duration_s;
  spec["renewTime"] = now;
  lease["spec"] = spec;
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
    json lease = client_.get(lease_path);
    if (lease["spec"].value("holderIdentity", "") != config_.identity) return;
    lease["spec"]["holderIdentity"] = "";
    lease["spec"]["leaseDurationSeconds"] = 1;
    lease["spec"]["renewTime"] = format_micro_time(std::chrono::system_clock::now());
    client_.update(lease_path, lease);
    spdlog::info("released the lease {}/{}", config_.lease_namespace, config_.lease_name);
  } catch (const std::exception& e) {
    spdlog::error("leader election: cannot release the lease: {}", e.what());
  }
}

}  // namespace kubetune::op
