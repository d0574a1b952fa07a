#include "trainer/metrics/observers.h"

#include "trainer/device/device.h"
#include "trainer/metrics/console_progress.h"
#include "trainer/metrics/history.h"
#include "trainer/metrics/prometheus_observer.h"
#include "trainer/metrics/tensorboard_writer.h"

namespace kubetune::train {

std::vector<std::unique_ptr<TrainingObserver>> make_observers(const TrainConfig& config,
                                                              const parallel::DistEnv& env,
                                                              const torch::Device& device) {
  std::vector<std::unique_ptr<TrainingObserver>> observers;
  if (env.rank == 0) {
    observers.push_back(std::make_unique<ProgressPrinter>(config.training.log_every_steps));
    observers.push_back(std::make_unique<HistoryWriter>(config.output.dir));
    observers.push_back(std::make_unique<metrics::TensorBoardWriter>(config.output.dir));
  }
  if (config.metrics.port > 0) {  // every rank, each on metrics.port + local rank
    PrometheusObserver::Options o;
    o.job = config.metrics.job_name;
    o.rank = env.rank;
    o.local_rank = env.local_rank;
    o.port = config.metrics.port + env.local_rank;
    o.linger_seconds = config.metrics.linger_seconds;
    if (device.is_cuda()) {
      o.gpu_device = device.str();
      o.read_memory = [device](DeviceMemory& m) { return device_memory(device, m); };
    }
    observers.push_back(std::make_unique<PrometheusObserver>(std::move(o)));
  }
  return observers;
}

}  // namespace kubetune::train
