// Progress read from Prometheus endpoints: the training's from rank 0 (the trainer's kubetune_*
// series), the fetch's from a fetch container (kubetune_fetch_*, common/metrics/fetch_series.h).
#pragma once

#include <optional>
#include <string>

#include "common/finetunejob_types.h"

namespace kubetune::op {

struct Progress {
  std::optional<double> step, total_steps, epoch, loss, tokens_per_second, eta_seconds;
  std::optional<double> reward_accuracy, reward_margin;  // preference objectives only
  std::optional<double> checkpoints;                     // kubetune_checkpoints_total
  std::optional<double> micro_batch_size, out_of_memory_recoveries;
};

// GETs `url` (http://ip:port/metrics); throws std::runtime_error when it cannot.
Progress scrape_progress(const std::string& url, int timeout_ms);

// How far a fetch container is, from its progress endpoint (http://POD_IP:kFetchMetricsPort,
// render/sources.h); throws std::runtime_error when it cannot be read.
api::FetchProgress scrape_fetch_progress(const std::string& url, int timeout_ms);

}  // namespace kubetune::op
