#include "operator/controller/operator_metrics.h"

#include <vector>

#include "common/metrics/operator_series.h"

namespace kubetune::op {
namespace {

namespace os = metrics::operator_series;

// Phases of status.phase (the state-set values of kubetune_operator_jobs).
const std::vector<std::string> kPhases = {"Pending",   "Created",   "Running", "Restarting",
                                          "Suspended", "Succeeded", "Failed"};

std::string help_of(std::string_view name) {
  for (const auto& s : os::kAll) {
    if (s.name == name) return std::string(s.help);
  }
  return std::string(name);
}

std::vector<double> duration_buckets() {
  return {os::kReconcileDurationBuckets.begin(), os::kReconcileDurationBuckets.end()};
}

}  // namespace

OperatorMetrics::OperatorMetrics()
    : registry_(std::make_shared<metrics::Registry>()),
      reconcile_total_(
          registry_->counter(std::string(os::kReconcileTotal), help_of(os::kReconcileTotal))),
      reconcile_duration_(registry_
                              ->histogram(std::string(os::kReconcileDurationSeconds),
                                          help_of(os::kReconcileDurationSeconds),
                                          duration_buckets())
                              .with()),
      queue_depth_(
          registry_->gauge(std::string(os::kWorkqueueDepth), help_of(os::kWorkqueueDepth)).with()),
      jobs_(registry_->gauge(std::string(os::kJobs), help_of(os::kJobs))),
      restarts_(
          registry_->counter(std::string(os::kJobRestartsTotal), help_of(os::kJobRestartsTotal))),
      step_(registry_->gauge(std::string(os::kJobProgressStep), help_of(os::kJobProgressStep))),
      total_steps_(registry_->gauge(std::string(os::kJobTotalSteps), help_of(os::kJobTotalSteps))),
      loss_(registry_->gauge(std::string(os::kJobLoss), help_of(os::kJobLoss))),
      tokens_per_second_(
          registry_->gauge(std::string(os::kJobTokensPerSecond), help_of(os::kJobTokensPerSecond))),
      is_leader_(registry_->gauge(std::string(os::kIsLeader), help_of(os::kIsLeader)).with()) {
  for (auto r : os::kReconcileResults) reconcile_total_.with({{"result", std::string(r)}});
}

void OperatorMetrics::reconciled(const std::string& result, double seconds) {
  reconcile_total_.with({{"result", result}}).inc();
  reconcile_duration_.observe(seconds);
}

void OperatorMetrics::set_phase(const std::string& ns, const std::string& job,
                                const std::string& phase) {
  for (const auto& p : kPhases) {
    jobs_.with({{"namespace", ns}, {"job", job}, {"phase", p}}).set(p == phase ? 1 : 0);
  }
}

void OperatorMetrics::restarted(const std::string& ns, const std::string& job) {
  restarts_.with({{"namespace", ns}, {"job", job}}).inc();
}

void OperatorMetrics::set_progress(const std::string& ns, const std::string& job, double step,
                                   double total, double loss, double tokens_per_second) {
  const metrics::Labels l = {{"namespace", ns}, {"job", job}};
  step_.with(l).set(step);
  total_steps_.with(l).set(total);
  loss_.with(l).set(loss);
  tokens_per_second_.with(l).set(tokens_per_second);
}

void OperatorMetrics::forget_job(const std::string& ns, const std::string& job) {
  for (const auto& p : kPhases) jobs_.remove({{"namespace", ns}, {"job", job}, {"phase", p}});
  const metrics::Labels l = {{"namespace", ns}, {"job", job}};
  restarts_.remove(l);
  step_.remove(l);
  total_steps_.remove(l);
  loss_.remove(l);
  tokens_per_second_.remove(l);
}

}  // namespace kubetune::op
