#include "trainer/metrics/prometheus_observer.h"

#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/metrics/series_spec.h"
#include "common/metrics/trainer_series.h"

namespace kubetune::train {
namespace {

namespace ts = metrics::trainer_series;

// Help texts come from the series table, so the exporter cannot drift from the contract.
std::string help_of(std::string_view name) {
  const metrics::SeriesSpec* spec = metrics::find_spec(ts::kAll, name);
  if (spec == nullptr)
    throw std::logic_error("metric " + std::string(name) + " is not in trainer_series.h");
  return std::string(spec->help);
}

metrics::Labels with_extra(metrics::Labels labels, const metrics::Labels& extra) {
  labels.insert(extra.begin(), extra.end());
  return labels;
}

std::unique_ptr<metrics::Exposer> open_exposer(const std::string& address, int port,
                                               int local_rank) {
  try {
    return std::make_unique<metrics::Exposer>(address, port);
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
      registry_(std::make_shared<metrics::Registry>()) {
  tokens_total_ = &counter(ts::kTokensTotal);
  samples_total_ = &counter(ts::kSamplesTotal);
  checkpoints_total_ = &counter(ts::kCheckpointsTotal);
  // Timeouts abort the run (the launcher stops every rank), so from inside the process this stays
  // at zero; it is exported so that alerts on increase() see a series that exists.
  counter(ts::kCollectiveTimeoutsTotal);
  auto phase = [&](std::string_view name) {
    return &counter(ts::kStepPhaseSecondsTotal, {{"phase", std::string(name)}});
  };
  phase_data_ = phase(ts::kStepPhases[0]);
  phase_forward_backward_ = phase(ts::kStepPhases[1]);
  phase_allreduce_ = phase(ts::kStepPhases[2]);
  phase_optimizer_ = phase(ts::kStepPhases[3]);
  const std::vector<double> buckets(ts::kStepSecondsBuckets.begin(), ts::kStepSecondsBuckets.end());
  step_seconds_ =
      &registry_->histogram(std::string(ts::kStepSeconds), help_of(ts::kStepSeconds), buckets)
           .with(labels_);

  // Serve only once every family above exists: the first scrape already shows the counters.
  exposer_ = open_exposer(options_.address, options_.port, options_.local_rank);
  exposer_->add_registry(registry_);
}

metrics::Gauge& PrometheusObserver::gauge(std::string_view name, const metrics::Labels& extra) {
  return registry_->gauge(std::string(name), help_of(name)).with(with_extra(labels_, extra));
}

metrics::Counter& PrometheusObserver::counter(std::string_view name, const metrics::Labels& extra) {
  return registry_->counter(std::string(name), help_of(name)).with(with_extra(labels_, extra));
}

void PrometheusObserver::on_step(const StepStats& s) {
  gauge(ts::kStep).set(static_cast<double>(s.step));
  gauge(ts::kTotalSteps).set(static_cast<double>(s.total_steps));
  gauge(ts::kEpoch).set(s.epoch);
  gauge(ts::kEtaSeconds).set(s.eta_seconds);
  gauge(ts::kTrainLoss).set(s.loss);
  gauge(ts::kLearningRate).set(s.learning_rate);
  gauge(ts::kGradNorm).set(s.grad_norm);
  gauge(ts::kTokensPerSecond).set(s.tokens_per_second);
  gauge(ts::kSamplesPerSecond)
      .set(s.step_seconds > 0 ? static_cast<double>(s.local_samples) / s.step_seconds : 0.0);
  if (s.eval_loss) gauge(ts::kEvalLoss).set(*s.eval_loss);

  // This rank's share only: sum(kubetune_tokens_total) over ranks is the job's total.
  tokens_total_->inc(static_cast<double>(s.local_tokens));
  samples_total_->inc(static_cast<double>(s.local_samples));
  step_seconds_->observe(s.step_seconds);
  phase_data_->inc(s.data_seconds);
  phase_forward_backward_->inc(s.forward_backward_seconds);
  phase_allreduce_->inc(s.allreduce_wait_seconds);
  phase_optimizer_->inc(s.optimizer_seconds);

  if (!options_.gpu_device.empty()) {
    gauge(ts::kMfuRatio).set(s.mfu);
    update_memory();
  }
}

void PrometheusObserver::update_memory() {
  DeviceMemory m;
  if (!options_.read_memory || !options_.read_memory(m)) return;
  const metrics::Labels device{{"device", options_.gpu_device}};
  gauge(ts::kGpuMemoryAllocatedBytes, device).set(static_cast<double>(m.allocated));
  gauge(ts::kGpuMemoryReservedBytes, device).set(static_cast<double>(m.reserved));
  gauge(ts::kGpuMemoryPeakBytes, device).set(static_cast<double>(m.peak));
  gauge(ts::kGpuMemoryTotalBytes, device).set(static_cast<double>(m.total));
}

void PrometheusObserver::on_eval(int64_t /*step*/, double eval_loss) {
  gauge(ts::kEvalLoss).set(eval_loss);
}

void PrometheusObserver::on_checkpoint(int64_t /*step*/, const std::string& /*path*/) {
  checkpoints_total_->inc();
}

void PrometheusObserver::on_finish(const StepStats& last) {
  // The loop has already reported `last` through on_step; only the final evaluation may be new.
  if (last.eval_loss) gauge(ts::kEvalLoss).set(*last.eval_loss);
  if (!options_.gpu_device.empty()) update_memory();
  if (options_.linger_seconds > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.linger_seconds));
}

}  // namespace kubetune::train
