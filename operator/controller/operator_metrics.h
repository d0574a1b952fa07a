// The operator's own metrics (names from common/metrics/operator_series.h), on /metrics.
#pragma once

#include <memory>
#include <string>

#include "common/metrics/registry.h"

namespace kubetune::op {

class OperatorMetrics {
 public:
  OperatorMetrics();
  std::shared_ptr<metrics::Registry> registry() const { return registry_; }

  void reconciled(const std::string& result, double seconds);  // success | error | requeue
  void set_queue_depth(size_t depth) { queue_depth_.set(static_cast<double>(depth)); }
  void set_leader(bool leader) { is_leader_.set(leader ? 1 : 0); }
  // State set: 1 for `phase`, 0 for the job's other phases.
  void set_phase(const std::string& ns, const std::string& job, const std::string& phase);
  void restarted(const std::string& ns, const std::string& job);
  void set_progress(const std::string& ns, const std::string& job, double step, double total,
                    double loss, double tokens_per_second);
  void forget_job(const std::string& ns, const std::string& job);  // the job was deleted

 private:
  std::shared_ptr<metrics::Registry> registry_;
  metrics::Family<metrics::Counter>& reconcile_total_;
  metrics::Histogram& reconcile_duration_;
  metrics::Gauge& queue_depth_;
  metrics::Family<metrics::Gauge>& jobs_;
  metrics::Family<metrics::Counter>& restarts_;
  metrics::Family<metrics::Gauge>& step_;
  metrics::Family<metrics::Gauge>& total_steps_;
  metrics::Family<metrics::Gauge>& loss_;
  metrics::Family<metrics::Gauge>& tokens_per_second_;
  metrics::Gauge& is_leader_;
};

}  // namespace kubetune::op
