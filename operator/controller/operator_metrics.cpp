#include "operator/controller/operator_metrics.h"

#include <vector>

#include "common/metrics/operator_series.h"
#include "common/metrics/spec_families.h"

namespace kubetune::op {
namespace {

namespace os = metrics::operator_series;
using metrics::counter_family;
using metrics::gauge_family;

prometheus::Histogram::BucketBoundaries duration_buckets() {
  return {os::kReconcileDurationBuckets.begin(), os::kReconcileDurationBuckets.end()};
}

}  // namespace

OperatorMetrics::OperatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      reconcile_total_(counter_family(*registry_, os::kAll, os::kReconcileTotal)),
      reconcile_duration_(
          metrics::histogram_family(*registry_, os::kAll, os::kReconcileDurationSeconds)
              .Add({}, duration_buckets())),
      queue_depth_(gauge_family(*registry_, os::kAll, os::kWorkqueueDepth).Add({})),
      jobs_(gauge_family(*registry_, os::kAll, os::kJobs)),
      restarts_(counter_family(*registry_, os::kAll, os::kJobRestartsTotal)),
      step_(gauge_family(*registry_, os::kAll, os::kJobProgressStep)),
      total_steps_(gauge_family(*registry_, os::kAll, os::kJobTotalSteps)),
      loss_(gauge_family(*registry_, os::kAll, os::kJobLoss)),
      tokens_per_second_(gauge_family(*registry_, os::kAll, os::kJobTokensPerSecond)),
      is_leader_(gauge_family(*registry_, os::kAll, os::kIsLeader).Add({})),
      unscheduled_workers_(gauge_family(*registry_, os::kAll, os::kJobUnscheduledWorkers)),
      idle_held_gpus_(gauge_family(*registry_, os::kAll, os::kJobIdleHeldGpus)),
      gang_releases_(counter_family(*registry_, os::kAll, os::kJobGangReleasesTotal)),
      evictions_(counter_family(*registry_, os::kAll, os::kJobEvictionsTotal)),
      api_requests_(counter_family(*registry_, os::kAll, os::kApiRequestsTotal)) {
  for (auto r : os::kReconcileResults) reconcile_total_.Add({{"result", std::string(r)}});
}

void OperatorMetrics::reconciled(const std::string& result, double seconds) {
  reconcile_total_.Add({{"result", result}}).Increment();
  reconcile_duration_.Observe(seconds);
}

void OperatorMetrics::set_phase(const std::string& ns, const std::string& job,
                                std::optional<Phase> phase) {
  for (auto p : os::kJobPhases) {
    jobs_.Add({{"namespace", ns}, {"job", job}, {"phase", std::string(p)}})
        .Set(phase && p == to_string(*phase) ? 1 : 0);
  }
}

void OperatorMetrics::restarted(const std::string& ns, const std::string& job) {
  restarts_.Add({{"namespace", ns}, {"job", job}}).Increment();
}

void OperatorMetrics::set_progress(const std::string& ns, const std::string& job, double step,
                                   double total, double loss, double tokens_per_second) {
  const prometheus::Labels l = {{"namespace", ns}, {"job", job}};
  step_.Add(l).Set(step);
  total_steps_.Add(l).Set(total);
  loss_.Add(l).Set(loss);
  tokens_per_second_.Add(l).Set(tokens_per_second);
}

void OperatorMetrics::set_scheduling(const std::string& ns, const std::string& job, int unscheduled,
                                     int idle_held_gpus) {
  const prometheus::Labels l = {{"namespace", ns}, {"job", job}};
  unscheduled_workers_.Add(l).Set(unscheduled);
  idle_held_gpus_.Add(l).Set(idle_held_gpus);
}

void OperatorMetrics::released_gang(const std::string& ns, const std::string& job) {
  gang_releases_.Add({{"namespace", ns}, {"job", job}}).Increment();
}

void OperatorMetrics::evicted(const std::string& ns, const std::string& job) {
  evictions_.Add({{"namespace", ns}, {"job", job}}).Increment();
}

void OperatorMetrics::requested(const std::string& verb, int code) {
  api_requests_.Add({{"verb", verb}, {"code", std::to_string(code)}}).Increment();
}

void OperatorMetrics::forget_job(const std::string& ns, const std::string& job) {
  for (auto p : os::kJobPhases) {
    metrics::remove_series(jobs_, {{"namespace", ns}, {"job", job}, {"phase", std::string(p)}});
  }
  const prometheus::Labels l = {{"namespace", ns}, {"job", job}};
  metrics::remove_series(restarts_, l);
  metrics::remove_series(step_, l);
  metrics::remove_series(total_steps_, l);
  metrics::remove_series(loss_, l);
  metrics::remove_series(tokens_per_second_, l);
  metrics::remove_series(unscheduled_workers_, l);
  metrics::remove_series(idle_held_gpus_, l);
  metrics::remove_series(gang_releases_, l);
  metrics::remove_series(evictions_, l);
}

}  // namespace kubetune::op
