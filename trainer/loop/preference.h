// Preference objectives (training.objective dpo, ipo, simpo, orpo) around the step: the reference
// log-probabilities computed once before the first step, and held-out pairs scored.
#pragma once

#include <torch/types.h>

#include <vector>

#include "common/train_config.h"
#include "trainer/data/example.h"
#include "trainer/model/causal_lm.h"
#include "trainer/model/preference_loss.h"
#include "trainer/parallel/communicator.h"

namespace kubetune::train {

// Where pairs are scored: the model, how, and the processes that share the work.
struct PairScoring {
  model::CausalLMImpl& model;
  torch::Device device;
  torch::Dtype dtype;
  parallel::Communicator& comm;
  int64_t micro_batch = 1;  // pairs per forward
  int32_t pad_id = 0;
  int64_t chunk_rows = 4096;  // loss.h: logits rows at a time
};

// Pairs scored by `model` at the run's micro-batch (training.microBatchSize, resolved).
PairScoring pair_scoring(model::CausalLMImpl& model, torch::Device device, torch::Dtype dtype,
                         parallel::Communicator& comm, const TrainConfig& c, int32_t pad_id);

// Every pair's log-probabilities (chosen, rejected) under the model as it is now: [pairs, 2] fp64
// on the host, the same on every rank. For dpo and ipo, computed before the first step and before
// a checkpoint is restored, it is the reference: the starting weights (for LoRA the base, the new
// adapters being zero), so a resumed or restarted run compares with the same model without a
// second copy of it.
torch::Tensor pair_log_probs(const PairScoring& s, const std::vector<data::Example>& pairs);

struct PairEvaluation {
  double loss = 0;      // the objective's loss over all pairs (what training minimises)
  double accuracy = 0;  // pairs whose chosen reward is above the rejected one's
  double margin = 0;    // mean chosen reward minus rejected reward
  // Pairs whose chosen answer the model finds likelier per token than the rejected one: what a
  // person reads as "prefers the chosen answer" (about one half for a model that has not learnt).
  double preferred = 0;
};
// `reference`: pair_log_probs of the same pairs, when the objective uses one.
PairEvaluation evaluate_pairs(const PairScoring& s, const model::PreferenceObjective& objective,
                              const std::vector<data::Example>& pairs,
                              const torch::Tensor& reference);

// The reference values of the pairs `indices` in the order pair_batch lays them out: every chosen
// one, then every rejected one ([2N] fp64, host).
torch::Tensor reference_rows(const torch::Tensor& reference, const std::vector<size_t>& indices);

}  // namespace kubetune::train
