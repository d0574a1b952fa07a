// The run's set-up, before the first step: what is read from the user's files, the resume point
// every rank agrees on, the micro-batch every rank agrees on, and restoring a checkpoint.
#pragma once

#include <torch/types.h>

#include <optional>
#include <vector>

#include "common/train_config.h"
#include "trainer/loop/checkpoint.h"
#include "trainer/loop/resume_check.h"
#include "trainer/loop/run.h"
#include "trainer/parallel/communicator.h"
#include "trainer/plan/batch_shape.h"
#include "trainer/plan/micro_batch.h"

namespace kubetune::train {

struct UserInputs {
  TextTools text;
  std::vector<data::Example> train, validation;
  model::CausalLM model;
};
// Everything read from the user's files (model, tokenizer, data): a failure here is theirs to
// fix, not ours to retry (UserInputError). `after_part`: load_model's.
UserInputs load_user_inputs(const TrainConfig& c, const torch::Device& device, torch::Dtype dtype,
                            int local_processes, const PartLoaded& after_part = {});

// Rank 0 picks and verifies the checkpoint to resume from and tells the others its step, which
// they load without hashing it again; a refusal stops all ranks together.
std::optional<CheckpointContents> agree_on_resume_point(parallel::Communicator& comm,
                                                        const TrainConfig& c,
                                                        const torch::Device& device,
                                                        const ResumeCheck& fits_run);

// training.microBatchSize auto is chosen from rank 0's GPU and taken by every rank (a gang's GPUs
// are alike, and the ranks' micro-batches must be cut the same way); a number stays as it is.
MicroBatchChoice agree_on_micro_batch(parallel::Communicator& comm, TrainConfig& c,
                                      const model::ModelConfig& model, const torch::Device& device,
                                      int64_t resumed_global_batch);

// Where the run starts: step 0, or the counters of the checkpoint it resumes from.
TrainerState start_state(const TrainConfig& c, const BatchShape& shape, int world_size,
                         const std::optional<CheckpointContents>& checkpoint);
// The checkpoint was checked to fit (resume_check.h): names and shapes match.
void restore_optimizer(Run& run, const CheckpointContents& c);

}  // namespace kubetune::train
