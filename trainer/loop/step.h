// One optimizer step, queued on the device and read back later (step.cpp says how, top to bottom).
#pragma once

#include <cstdint>

#include "trainer/device/device.h"
#include "trainer/loop/run.h"
#include "trainer/metrics/step_stats.h"

namespace kubetune::train {

// What a step's collectives computed, all global (summed over ranks). One definition of the
// values and their order: on the device as scalars (T = torch::Tensor), read back as doubles.
template <class T>
struct StepResults {
  T loss_sum;             // summed over every target token of the global batch
  T global_targets;       // target tokens of the global batch
  T global_tokens;        // non-padding tokens of the global batch
  T grad_norm;            // before clipping
  T stop_votes;           // ranks asked to stop (stop_signal.h)
  T out_of_memory_votes;  // ranks that ran out of GPU memory in this step
  // A preference objective (loss_sum is then orpo's NLL over the chosen sequences' tokens, else 0):
  // (kto: global_pairs counts examples; kl is the step's KL estimate, else 0.)
  T global_pairs, chosen_tokens, pair_loss_sum, kl;
  T preference[model::kPreferenceStats];  // sums over the pairs (preference_loss.h)

  template <class F>
  void each(F&& f) {
    for (T* v : {&loss_sum, &global_targets, &global_tokens, &grad_norm, &stop_votes,
                 &out_of_memory_votes, &global_pairs, &chosen_tokens, &pair_loss_sum, &kl})
      f(*v);
    for (T& v : preference) f(v);
  }
};

// A step whose work is queued on the device but whose results have not been read back yet. The
// loop reads a step back only after queueing the next one, so the GPU never idles while the host
// prints progress or prepares the next batch.
struct PendingStep {
  StepStats stats;
  torch::Tensor results;        // StepResults' values on the host, in their order (when copied)
  DeviceTimeline timeline;      // marks, in order: StepMark
  torch::Tensor expert_tokens;  // a mixture of experts: this rank's tokens per expert (host)
};
enum StepMark : size_t { kStart, kLastGradient, kGradientsSynced, kWeightsUpdated, kResultsCopied };

PendingStep queue_step(Run& run);
// Waits for a queued step and fills in what only the device knew.
StepStats finish_step(Run& run, PendingStep& p);

// Every rank read the same vote: some rank ran out of GPU memory in the step after `rerun_from`.
// The steps queued since changed no weight; they are forgotten and the step runs again with a
// smaller micro-batch and more accumulation, so the global batch and the update are unchanged.
void recover_from_out_of_memory(Run& run, int64_t rerun_from);

// A NaN or infinite loss or gradient norm never recovers: every rank stops here together (the
// values are global); the last checkpoint, written before, stays the one to resume from.
void stop_if_diverged(const Run& run, const StepStats& s);

}  // namespace kubetune::train
