// Training progress read from rank 0's Prometheus endpoint (the trainer's kubetune_* series).
#pragma once

#include <optional>
#include <string>

namespace kubetune::op {

struct Progress {
  std::optional<double> step, total_steps, epoch, loss, tokens_per_second, eta_seconds;
  std::optional<double> checkpoints;  // kubetune_checkpoints_total
  std::optional<double> micro_batch_size, out_of_memory_recoveries;
};

// GETs `url` (http://ip:port/metrics); throws std::runtime_error when it cannot.
Progress scrape_progress(const std::string& url, int timeout_ms);

}  // namespace kubetune::op
