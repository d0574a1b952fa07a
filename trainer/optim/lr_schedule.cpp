#include "trainer/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace kubetune::optim {

double LrSchedule::at(long step) const {
  if (step < warmup_steps) return peak_lr * static_cast<double>(step) / std::max(1L, warmup_steps);
  if (kind == api::TrainingLrScheduler::kConstant) return peak_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / std::max(1L, total_steps - warmup_steps);
  if (kind == api::TrainingLrScheduler::kLinear) return peak_lr * std::max(0.0, 1.0 - progress);
  return peak_lr * std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * progress)));  // cosine, half a cycle
}

}  // namespace kubetune::optim
