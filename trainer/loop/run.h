// The whole run's state that the training step, the checkpoints and the outputs read and write.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/train_config.h"
#include "trainer/data/example.h"
#include "trainer/data/sampler.h"
#include "trainer/inputs/run_inputs.h"
#include "trainer/loop/checkpoint.h"
#include "trainer/metrics/observers.h"
#include "trainer/model/causal_lm.h"
#include "trainer/model/lora.h"
#include "trainer/model/preference_loss.h"
#include "trainer/optim/adamw.h"
#include "trainer/optim/lr_schedule.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/weight_sync.h"

namespace kubetune::train {

struct Run {
  TrainConfig& config;  // training.microBatchSize changes when a step runs out of memory
  parallel::Communicator& comm;
  torch::Device device;
  torch::Dtype dtype;
  model::CausalLM model;
  NamedParams trainable;
  // How the processes' weights stay in step; the optimizer updates what it hands out.
  std::unique_ptr<parallel::WeightSync> weight_sync;
  optim::AdamW optimizer;
  optim::LrSchedule schedule;
  data::DistributedSampler sampler;
  std::vector<data::Example> train, validation;
  TextTools text;
  TrainerState state;
  std::vector<std::unique_ptr<TrainingObserver>> observers;
  // Called by a hook whenever a trainable parameter receives its gradient: the last call of a
  // step is when this rank's own backward ended and waiting for the other ranks began.
  std::shared_ptr<std::function<void()>> on_gradient;
  int64_t checkpointed_step = -1;  // the step the last checkpoint holds
  // This rank ran out of GPU memory: it votes to skip every step queued until all ranks have
  // read the vote and re-run the step (recover_from_out_of_memory).
  bool out_of_memory_pending = false;
  // A preference objective (training.objective other than sft); none for SFT.
  std::optional<model::PreferenceObjective> preference = std::nullopt;
  // Its reference log-probabilities (preference.h: pair_log_probs), [pairs, 2]; undefined when the
  // objective needs none.
  torch::Tensor train_reference = {}, validation_reference = {};
};

// training.objective as the step takes it: none for sft.
std::optional<model::PreferenceObjective> preference_objective(const TrainConfig& c);

// method.lora as the model takes it; none when the run trains no adapters.
std::optional<model::LoraConfig> lora_config(const TrainConfig& c);

}  // namespace kubetune::train
