#include "operator/policy/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/metrics/fetch_series.h"
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
  p.reward_accuracy = value(ts::kPreferenceRewardAccuracy);
  p.reward_margin = value(ts::kPreferenceRewardMargin);
  p.eta_seconds = value(ts::kEtaSeconds);
  p.checkpoints = value(ts::kCheckpointsTotal);
  p.micro_batch_size = value(ts::kMicroBatchSize);
  p.out_of_memory_recoveries = value(ts::kOutOfMemoryRecoveriesTotal);
  return p;
}

api::FetchProgress scrape_fetch_progress(const std::string& url, int timeout_ms) {
  namespace fs = metrics::fetch_series;
  const auto page = metrics::parse_text_format(metrics::http_get(url, timeout_ms));
  // One series per source: the fetch as a whole is their sum (the ETA: the longest).
  auto sum = [&](std::string_view name, bool longest = false) -> std::optional<int64_t> {
    std::optional<double> total;
    for (const auto& [key, value] : page) {
      if (key.rfind(std::string(name) + "{", 0) != 0 && key != name) continue;
      total = longest ? std::max(total.value_or(0), value) : total.value_or(0) + value;
    }
    if (!total) return std::nullopt;
    return static_cast<int64_t>(std::llround(*total));
  };
  api::FetchProgress p;
  p.bytes = sum(fs::kBytes);
  p.total_bytes = sum(fs::kTotalBytes);
  p.bytes_per_second = sum(fs::kBytesPerSecond);
  p.eta_seconds = sum(fs::kEtaSeconds, true);
  if (p.bytes && p.total_bytes && *p.total_bytes > 0) {
    char line[160];
    std::snprintf(line, sizeof line, "%.1f of %.1f MiB (%.0f%%), %.1f MiB/s, ETA %llds",
                  *p.bytes / 1048576.0, *p.total_bytes / 1048576.0,
                  100.0 * *p.bytes / *p.total_bytes, p.bytes_per_second.value_or(0) / 1048576.0,
                  static_cast<long long>(p.eta_seconds.value_or(0)));
    p.summary = line;
  }
  return p;
}

}  // namespace kubetune::op
