#include "trainer/metrics/console_progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/log.h"

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
  auto line = log::info();
  line << "step=" << s.step << "/" << s.total_steps << " epoch=" << log::fixed(s.epoch, 2)
       << " loss=" << log::fixed(s.loss, 4) << " lr=" << log::general(s.learning_rate, 3)
       << " grad_norm=" << log::fixed(s.grad_norm, 3);
  if (const auto& p = s.preference) {
    if (p->rewards_accuracies) line << " reward_accuracy=" << log::fixed(*p->rewards_accuracies, 3);
    if (p->rewards_margins) line << " reward_margin=" << log::fixed(*p->rewards_margins, 4);
    if (p->kl) line << " kl=" << log::fixed(*p->kl, 4);
  }
  line << " tokens_per_second=" << log::fixed(s.tokens_per_second, 0)
       << " elapsed=" << format_duration(s.elapsed_seconds)
       << " eta=" << format_duration(s.eta_seconds);
}

void ProgressPrinter::on_eval(int64_t step, double eval_loss) {
  log::info() << "eval step=" << step << " eval_loss=" << log::fixed(eval_loss, 4);
}

void ProgressPrinter::on_checkpoint(int64_t step, const std::string& path) {
  log::info() << "checkpoint step=" << step << " path=" << path;
}

void ProgressPrinter::on_finish(const StepStats& last) {
  log::info() << "done steps=" << last.step << " elapsed=" << format_duration(last.elapsed_seconds)
              << " final_loss=" << log::fixed(last.loss, 4);
}

}  // namespace kubetune::train
