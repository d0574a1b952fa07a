// `kubetune-trainer train`: the whole training run, from config to adapter or model folder.
#pragma once

#include <stdexcept>

#include "common/train_config.h"

namespace kubetune::train {

// A problem in what the user gave us (model folder, data, config): retrying cannot fix it.
class UserInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int run_training(const TrainConfig& config);

}  // namespace kubetune::train
