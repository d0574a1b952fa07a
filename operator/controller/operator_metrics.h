// The operator's own metrics (names from common/metrics/operator_series.h), on /metrics.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "operator/policy/phase.h"

namespace kubetune::op {

class OperatorMetrics {
 public:
  OperatorMetrics();
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void reconciled(const std::string& result, double seconds);  // success | error | requeue
  void set_queue_depth(size_t depth) { queue_depth_.Set(static_cast<double>(depth)); }
  void set_leader(bool leader) { is_leader_.Set(leader ? 1 : 0); }
  // State set: 1 for `phase`, 0 for the job's other phases.
  void set_phase(const std::string& ns, const std::string& job, std::optional<Phase> phase);
  void restarted(const std::string& ns, const std::string& job);
  void set_progress(const std::string& ns, const std::string& job, double step, double total,
                    double loss, double tokens_per_second);
  // The current gang's placement: workers the scheduler could not place, and the GPUs its bound
  // workers hold meanwhile (0 unless the gang is partly scheduled).
  void set_scheduling(const std::string& ns, const std::string& job, int unscheduled,
                      int idle_held_gpus);
  void released_gang(const std::string& ns, const std::string& job);
  void evicted(const std::string& ns, const std::string& job);
  void forget_job(const std::string& ns, const std::string& job);  // the job was deleted
  void requested(const std::string& verb, int code);               // one request to the API server

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& reconcile_total_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Counter>& restarts_;
  prometheus::Family<prometheus::Gauge>& step_;
  prometheus::Family<prometheus::Gauge>& total_steps_;
  prometheus::Family<prometheus::Gauge>& loss_;
  prometheus::Family<prometheus::Gauge>& tokens_per_second_;
  prometheus::Gauge& is_leader_;
  prometheus::Family<prometheus::Gauge>& unscheduled_workers_;
  prometheus::Family<prometheus::Gauge>& idle_held_gpus_;
  prometheus::Family<prometheus::Counter>& gang_releases_;
  prometheus::Family<prometheus::Counter>& evictions_;
  prometheus::Family<prometheus::Counter>& api_requests_;
};

}  // namespace kubetune::op
