#include "operator/controller/progress.h"

#include "common/metrics/scrape.h"
#include "common/metrics/trainer_series.h"

namespace kubetune::op {

Progress scrape_progress(const std::string& url, int timeout_ms) {
  namespace ts = metrics::trainer_series;
  const auto series = metrics::parse_text_format(metrics::http_get(url, timeout_ms));
  auto value = [&](std::string_view name) {
    return metrics::first_value(series, std::string(name));
  };
  Progress p;
  p.step = value(ts::kStep);
  p.total_steps = value(ts::kTotalSteps);
  p.epoch = value(ts::kEpoch);
  p.loss = value(ts::kTrainLoss);
  p.tokens_per_second = value(ts::kTokensPerSecond);
  p.eta_seconds = value(ts::kEtaSeconds);
  p.checkpoints = value(ts::kCheckpointsTotal);
  p.micro_batch_size = value(ts::kMicroBatchSize);
  p.out_of_memory_recoveries = value(ts::kOutOfMemoryRecoveriesTotal);
  return p;
}

}  // namespace kubetune::op
