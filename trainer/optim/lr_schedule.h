// Learning-rate schedules with the formulas of transformers'
// get_{linear,cosine,constant}_schedule_with_warmup.
#pragma once

#include "common/finetunejob_types.h"

namespace kubetune::optim {

struct LrSchedule {
  api::TrainingLrScheduler kind = api::TrainingLrScheduler::kCosine;
  double peak_lr = 0;
  long warmup_steps = 0;
  long total_steps = 0;

  // The rate for optimizer step `step` (0-based), as HF's LambdaLR gives it.
  double at(long step) const;
};

}  // namespace kubetune::optim
