// The metrics history in the output folder (metrics_history.jsonl, one line per step, appended as
// training goes, so it survives a crash) and, at the end, training_curves.svg: loss and
// throughput over steps, for people without a Prometheus at hand.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "trainer/metrics/step_stats.h"

namespace kubetune::train {

class HistoryWriter : public TrainingObserver {
 public:
  explicit HistoryWriter(const std::string& output_dir);
  void on_step(const StepStats& s) override;
  void on_eval(int64_t step, double eval_loss) override;
  void on_finish(const StepStats& last) override;

 private:
  std::string dir_;
  std::ofstream jsonl_;
  std::vector<double> steps_, losses_, throughput_;
  std::vector<std::pair<double, double>> evals_;
};

// A two-panel SVG line chart (loss with eval points; tokens/s), self-contained.
std::string render_training_svg(const std::vector<double>& steps, const std::vector<double>& loss,
                                const std::vector<std::pair<double, double>>& eval_points,
                                const std::vector<double>& tokens_per_second);

}  // namespace kubetune::train
