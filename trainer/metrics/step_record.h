// The numbers of one step as the run's own records keep them: metrics_history.jsonl writes this
// object as a line and TensorBoard gets each number as a scalar, so the two always agree.
#pragma once

#include <nlohmann/json.hpp>

#include "trainer/metrics/step_stats.h"

namespace kubetune::metrics {

// {"step": N, "loss": ..., "learning_rate": ..., ...}; GPU memory only on a GPU.
nlohmann::json step_record(const train::StepStats& s);
// {"step": N, "eval_loss": ...}
nlohmann::json eval_record(int64_t step, double eval_loss);

}  // namespace kubetune::metrics
