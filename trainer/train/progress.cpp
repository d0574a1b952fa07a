#include "trainer/train/progress.h"

#include <spdlog/spdlog.h>

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
  spdlog::info(
      "step={}/{} epoch={:.2f} loss={:.4f} lr={:.3g} grad_norm={:.3f} tokens_per_second={:.0f} "
      "elapsed={} eta={}",
      s.step, s.total_steps, s.epoch, s.loss, s.learning_rate, s.grad_norm, s.tokens_per_second,
      format_duration(s.elapsed_seconds), format_duration(s.eta_seconds));
}

void ProgressPrinter::on_eval(int64_t step, double eval_loss) {
  spdlog::info("eval step={} eval_loss={:.4f}", step, eval_loss);
}

void ProgressPrinter::on_checkpoint(int64_t step, const std::string& path) {
  spdlog::info("checkpoint step={} path={}", step, path);
}

void ProgressPrinter::on_finish(const StepStats& last) {
  spdlog::info("done steps={} elapsed={} final_loss={:.4f}", last.step,
               format_duration(last.elapsed_seconds), last.loss);
}

}  // namespace kubetune::train
