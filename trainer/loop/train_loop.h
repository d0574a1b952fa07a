// `kubetune-trainer train`: the whole training run, from config to adapter or model folder.
#pragma once

#include "common/train_config.h"
#include "trainer/inputs/user_input_error.h"

namespace kubetune::train {

int run_training(const TrainConfig& config);

}  // namespace kubetune::train
