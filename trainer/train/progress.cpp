#include "trainer/train/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kubetune::train {

std::string format_duration(double seconds) {
  long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", s / 60, s % 60);
  return buf;
}

void ProgressPrinter::on_step(const StepStats& s) {
  if (s.step % every_ != 0 && s.step != s.total_steps && s.step != 1) return;
  std::printf(
      "step %ld/%ld | epoch %.2f | loss %.4f | lr %.3g | grad norm %.3f | %.0f tok/s | %s elapsed "
      "| ETA %s\n",
      static_cast<long>(s.step), static_cast<long>(s.total_steps), s.epoch, s.loss, s.learning_rate,
      s.grad_norm, s.tokens_per_second, format_duration(s.elapsed_seconds).c_str(),
      format_duration(s.eta_seconds).c_str());
  std::fflush(stdout);
}

void ProgressPrinter::on_eval(int64_t step, double eval_loss) {
  std::printf("eval at step %ld | loss %.4f\n", static_cast<long>(step), eval_loss);
  std::fflush(stdout);
}

void ProgressPrinter::on_checkpoint(int64_t step, const std::string& path) {
  std::printf("checkpoint at step %ld -> %s\n", static_cast<long>(step), path.c_str());
  std::fflush(stdout);
}

void ProgressPrinter::on_finish(const StepStats& last) {
  std::printf("done: %ld steps in %s, final loss %.4f\n", static_cast<long>(last.step),
              format_duration(last.elapsed_seconds).c_str(), last.loss);
  std::fflush(stdout);
}

}  // namespace kubetune::train
