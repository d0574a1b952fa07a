#include "trainer/metrics/prometheus_observer.h"

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/metrics/spec_families.h"
#include "common/metrics/trainer_series.h"

namespace kubetune::train {
namespace {

namespace ts = metrics::trainer_series;

prometheus::Labels with_extra(prometheus::Labels labels, const prometheus::Labels& extra) {
  labels.insert(extra.begin(), extra.end());
  return labels;
}

std::unique_ptr<metrics::HttpEndpoint> open_endpoint(const std::string& address, int port,
                                                     int local_rank) {
  try {
    return std::make_unique<metrics::HttpEndpoint>(address, port);
  } catch (const std::exception& e) {
    throw std::runtime_error("metrics.port: local rank " + std::to_string(local_rank) +
                             " cannot serve /metrics on " + address + ":" + std::to_string(port) +
                             " (metrics.port + local rank): " + e.what());
  }
}

}  // namespace

PrometheusObserver::PrometheusObserver(Options options)
    : options_(std::move(options)),
      labels_{{"job", options_.job},
              {"rank", std::to_string(options_.rank)},
              {"local_rank", std::to_string(options_.local_rank)}},
      registry_(std::make_shared<prometheus::Registry>()) {
  tokens_total_ = &counter(ts::kTokensTotal);
  samples_total_ = &counter(ts::kSamplesTotal);
  checkpoints_total_ = &counter(ts::kCheckpointsTotal);
  // Timeouts abort the run (the launcher stops every rank), so from inside the process this stays
  // at zero; it is exported so that alerts on increase() see a series that exists.
  counter(ts::kCollectiveTimeoutsTotal);
  out_of_memory_recoveries_ = &counter(ts::kOutOfMemoryRecoveriesTotal);
  auto phase = [&](std::string_view name) {
    return &counter(ts::kStepPhaseSecondsTotal, {{"phase", std::string(name)}});
  };
  phase_data_ = phase(ts::kStepPhases[0]);
  phase_forward_backward_ = phase(ts::kStepPhases[1]);
  phase_allreduce_ = phase(ts::kStepPhases[2]);
  phase_optimizer_ = phase(ts::kStepPhases[3]);
  const prometheus::Histogram::BucketBoundaries buckets(ts::kStepSecondsBuckets.begin(),
                                                        ts::kStepSecondsBuckets.end());
  step_seconds_ =
      &metrics::histogram_family(*registry_, ts::kAll, ts::kStepSeconds).Add(labels_, buckets);

  // Serve only once every family above exists: the first scrape already shows the counters.
  endpoint_ = open_endpoint(options_.address, options_.port, options_.local_rank);
  endpoint_->add_registry(registry_);
}

prometheus::Gauge& PrometheusObserver::gauge(std::string_view name,
                                             const prometheus::Labels& extra) {
  return metrics::gauge_family(*registry_, ts::kAll, name).Add(with_extra(labels_, extra));
}

prometheus::Counter& PrometheusObserver::counter(std::string_view name,
                                                 const prometheus::Labels& extra) {
  return metrics::counter_family(*registry_, ts::kAll, name).Add(with_extra(labels_, extra));
}

void PrometheusObserver::on_micro_batch(int64_t size, int64_t /*accumulation*/,
                                        bool after_out_of_memory) {
  gauge(ts::kMicroBatchSize).Set(static_cast<double>(size));
  if (after_out_of_memory) out_of_memory_recoveries_->Increment();
}

void PrometheusObserver::on_step(const StepStats& s) {
  gauge(ts::kStep).Set(static_cast<double>(s.step));
  gauge(ts::kTotalSteps).Set(static_cast<double>(s.total_steps));
  gauge(ts::kEpoch).Set(s.epoch);
  gauge(ts::kEtaSeconds).Set(s.eta_seconds);
  gauge(ts::kTrainLoss).Set(s.loss);
  gauge(ts::kLearningRate).Set(s.learning_rate);
  gauge(ts::kGradNorm).Set(s.grad_norm);
  gauge(ts::kTokensPerSecond).Set(s.tokens_per_second);
  gauge(ts::kSamplesPerSecond)
      .Set(s.step_seconds > 0 ? static_cast<double>(s.local_samples) / s.step_seconds : 0.0);
  if (s.eval_loss) gauge(ts::kEvalLoss).Set(*s.eval_loss);
  if (const auto& p = s.preference) {
    // A value the step has not (kto's batch without one kind of example) keeps its last one.
    const auto set = [&](std::string_view name, const std::optional<double>& value,
                         const prometheus::Labels& labels = {}) {
      if (value) gauge(name, labels).Set(*value);
    };
    set(ts::kPreferenceRewardAccuracy, p->rewards_accuracies);
    set(ts::kPreferenceRewardMargin, p->rewards_margins);
    set(ts::kPreferenceKl, p->kl);
    const auto& [chosen, rejected] = ts::kPreferenceAnswers;
    set(ts::kPreferenceReward, p->rewards_chosen, {{"answer", std::string(chosen)}});
    set(ts::kPreferenceReward, p->rewards_rejected, {{"answer", std::string(rejected)}});
    set(ts::kPreferenceLogProb, p->logps_chosen, {{"answer", std::string(chosen)}});
    set(ts::kPreferenceLogProb, p->logps_rejected, {{"answer", std::string(rejected)}});
  }

  // This rank's share only: sum(kubetune_tokens_total) over ranks is the job's total.
  tokens_total_->Increment(static_cast<double>(s.local_tokens));
  samples_total_->Increment(static_cast<double>(s.local_samples));
  step_seconds_->Observe(s.step_seconds);
  phase_data_->Increment(s.data_seconds);
  phase_forward_backward_->Increment(s.forward_backward_seconds);
  phase_allreduce_->Increment(s.allreduce_wait_seconds);
  phase_optimizer_->Increment(s.optimizer_seconds);
  for (size_t e = 0; e < s.expert_tokens.size(); ++e)
    counter(ts::kExpertTokensTotal, {{"expert", std::to_string(e)}}).Increment(s.expert_tokens[e]);

  if (!options_.gpu_device.empty()) {
    gauge(ts::kMfuRatio).Set(s.mfu);
    update_memory();
  }
}

void PrometheusObserver::update_memory() {
  DeviceMemory m;
  if (!options_.read_memory || !options_.read_memory(m)) return;
  const prometheus::Labels device{{"device", options_.gpu_device}};
  gauge(ts::kGpuMemoryAllocatedBytes, device).Set(static_cast<double>(m.allocated));
  gauge(ts::kGpuMemoryReservedBytes, device).Set(static_cast<double>(m.reserved));
  gauge(ts::kGpuMemoryPeakBytes, device).Set(static_cast<double>(m.peak));
  gauge(ts::kGpuMemoryTotalBytes, device).Set(static_cast<double>(m.total));
}

void PrometheusObserver::on_eval(int64_t /*step*/, double eval_loss) {
  gauge(ts::kEvalLoss).Set(eval_loss);
}

void PrometheusObserver::on_checkpoint(int64_t /*step*/, const std::string& /*path*/) {
  checkpoints_total_->Increment();
}

void PrometheusObserver::on_finish(const StepStats& last) {
  // The loop has already reported `last` through on_step; only the final evaluation may be new.
  if (last.eval_loss) gauge(ts::kEvalLoss).Set(*last.eval_loss);
  if (!options_.gpu_device.empty()) update_memory();
  if (options_.linger_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.linger_seconds));
}

}  // namespace kubetune::train
