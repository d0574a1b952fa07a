// What one optimizer step did: the record every observer (progress line, Prometheus, history file)
// receives, so each of them stays a few lines long.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/device/device_memory.h"

namespace kubetune::train {

// A preference objective's view of a step, TRL's metrics: means over the global batch's pairs
// (kto: over its desirable or undesirable examples). A value TRL does not log for the objective or
// the step is absent: the accuracy and the margin for kto, whose batches may lack one kind of
// example, and the KL estimate for the others.
struct PreferenceStats {
  std::optional<double> rewards_chosen, rewards_rejected, rewards_margins, rewards_accuracies;
  std::optional<double> logps_chosen, logps_rejected;
  std::optional<double> kl;
};

struct StepStats {
  int64_t step = 0;  // optimizer steps done (1-based after the first step)
  int64_t total_steps = 0;
  double epoch = 0;  // fractional epoch
  double loss = 0;   // global: summed over ranks and micro-batches, / global target tokens
  double learning_rate = 0;
  double grad_norm = 0;
  bool stop_requested = false;  // some rank was asked to stop (SIGTERM/SIGINT) before this step
  // Some rank ran out of GPU memory in this step (or was recovering from it): no weight changed,
  // and every rank re-runs the step at a smaller micro-batch (trainer/loop/step.cpp).
  bool out_of_memory = false;
  int64_t global_targets = 0;
  int64_t local_tokens = 0;   // non-padding tokens this rank processed this step
  int64_t global_tokens = 0;  // the same over all ranks
  int64_t local_samples = 0;
  double step_seconds = 0;
  // Parts of the step (seconds): preparing the batch (host); on the device's timeline, forward and
  // backward until this rank's last gradient, then waiting for the gradient all-reduce (slower
  // ranks, the network), then the optimizer (clip + update).
  double data_seconds = 0, forward_backward_seconds = 0, allreduce_wait_seconds = 0,
         optimizer_seconds = 0;
  double elapsed_seconds = 0;  // since training (or this resumed run) started
  double eta_seconds = 0;
  double tokens_per_second = 0;  // this rank, smoothed
  std::optional<double> eval_loss;
  double mfu = 0;  // model FLOPs utilisation estimate (GPU only, 0 on CPU)
  // A mixture of experts: the tokens this rank routed to each expert in this step, summed over
  // the sparse layers (empty for a dense model).
  std::vector<double> expert_tokens;
  std::optional<PreferenceStats> preference;  // training.objective other than sft
  bool has_device_memory = false;             // false on CPU: GPU series are then absent, not zero
  DeviceMemory device_memory;                 // this process's GPU
};

// Anything that wants to see training progress.
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  virtual void on_step(const StepStats& stats) = 0;
  virtual void on_eval(int64_t /*step*/, double /*eval_loss*/) {}
  virtual void on_checkpoint(int64_t /*step*/, const std::string& /*path*/) {}
  virtual void on_finish(const StepStats& /*last*/) {}
  // The micro-batch the steps run at: at the start, and each time a step that ran out of GPU
  // memory is re-run at a smaller one (after_out_of_memory).
  virtual void on_micro_batch(int64_t /*size*/, int64_t /*accumulation*/,
                              bool /*after_out_of_memory*/) {}
};

}  // namespace kubetune::train
