// The one-line-per-step progress report people read in `kubectl logs`.
#pragma once

#include "trainer/metrics/step_stats.h"

namespace kubetune::train {

class ProgressPrinter : public TrainingObserver {
 public:
  explicit ProgressPrinter(int64_t every_steps) : every_(every_steps) {}
  void on_step(const StepStats& s) override;
  void on_eval(int64_t step, double eval_loss) override;
  void on_checkpoint(int64_t step, const std::string& path) override;
  void on_finish(const StepStats& last) override;

 private:
  int64_t every_;
};

std::string format_duration(double seconds);  // 75 -> "1:15", 3725 -> "1:02:05"

}  // namespace kubetune::train
