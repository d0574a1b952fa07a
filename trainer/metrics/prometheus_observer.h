// Prometheus /metrics on every trainer rank: a TrainingObserver that turns each StepStats into the
// series listed in common/metrics/trainer_series.h (the contract with the dashboard, the alert
// rules and the operator).
//
// Every series carries job, rank and local_rank; the GPU memory gauges also carry device. Series
// that do not apply are absent rather than zero: GPU memory and MFU on CPU (a zero would read as
// "the GPU is idle"), eval loss until the first evaluation, step gauges until the first step.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>

#include "common/metrics/http_endpoint.h"
#include "trainer/metrics/step_stats.h"

namespace kubetune::train {

class PrometheusObserver : public TrainingObserver {
 public:
  // Reads this rank's GPU memory; returns false when there is none (CPU). Kept as a function so
  // this file needs no LibTorch and tests can fake a GPU.
  using MemoryReader = std::function<bool(DeviceMemory&)>;

  struct Options {
    std::string job;     // the `job` label (FineTuneJob name)
    int rank = 0;        // global rank
    int local_rank = 0;  // rank on this node
    std::string address = "0.0.0.0";
    int port = 0;               // this rank's port (already offset by local_rank); 0: OS picks
    std::string gpu_device;     // "cuda:<index>", or "" on CPU: no GPU series at all
    double linger_seconds = 0;  // keep serving this long in on_finish
    MemoryReader read_memory;   // may be empty: no memory series
  };

  // Starts serving /metrics at once (with the counters at zero). Throws std::runtime_error naming
  // metrics.port when the port cannot be opened.
  explicit PrometheusObserver(Options options);

  void on_step(const StepStats& stats) override;
  void on_eval(int64_t step, double eval_loss) override;
  void on_checkpoint(int64_t step, const std::string& path) override;
  // Publishes the final values, then sleeps linger_seconds so Prometheus scrapes them.
  void on_finish(const StepStats& last) override;
  void on_micro_batch(int64_t size, int64_t accumulation, bool after_out_of_memory) override;

  int port() const { return endpoint_->port(); }
  const prometheus::Registry& registry() const { return *registry_; }

 private:
  prometheus::Gauge& gauge(std::string_view name, const prometheus::Labels& extra = {});
  prometheus::Counter& counter(std::string_view name, const prometheus::Labels& extra = {});
  void update_memory();

  Options options_;
  prometheus::Labels labels_;  // job, rank, local_rank
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<metrics::HttpEndpoint> endpoint_;

  // Counters exist from the start so that rate() sees them begin at zero.
  prometheus::Counter* tokens_total_ = nullptr;
  prometheus::Counter* samples_total_ = nullptr;
  prometheus::Counter* checkpoints_total_ = nullptr;
  prometheus::Counter* out_of_memory_recoveries_ = nullptr;
  prometheus::Counter* phase_data_ = nullptr;
  prometheus::Counter* phase_forward_backward_ = nullptr;
  prometheus::Counter* phase_allreduce_ = nullptr;
  prometheus::Counter* phase_optimizer_ = nullptr;
  prometheus::Histogram* step_seconds_ = nullptr;
};

}  // namespace kubetune::train
