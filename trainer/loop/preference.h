// Preference objectives (training.objective dpo, ipo, simpo, orpo, kto) around the step: the
// reference log-probabilities computed once before the first step, and held-out pairs (or examples)
// scored.
#pragma once

#include <torch/types.h>

#include <optional>
#include <vector>

#include "common/train_config.h"
#include "trainer/data/batch.h"
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
// on the host, the same on every rank. For dpo, ipo and kto, computed before the first step and
// before a checkpoint is restored, it is the reference: the starting weights (for LoRA the base,
// the new adapters being zero), so a resumed or restarted run compares with the same model without
// a second copy of it.
torch::Tensor pair_log_probs(const PairScoring& s, const std::vector<data::Example>& pairs);

// The reference of a run (train, validation: pair_log_probs of each, [pairs, 2]), computed once and
// kept in its checkpoint folder as reference_logps.safetensors (written atomically), so that a
// resumed run or a restarted gang reads it instead of making a pass over the data. The file names
// what the values depend on (the data files' checksums, the model folder, data.maxLength, the
// method, its quantization and the model's precision); a file made for anything else is computed
// again.
struct ReferenceLogProbs {
  torch::Tensor train, validation;
};
// Rank 0 looks for the file; every rank gets its values (or computes them with the others, and
// rank 0 writes the file). Under the starting weights: call before a checkpoint is restored.
// `global_batch`: the run's (kto's KL sequences depend on it).
ReferenceLogProbs reference_log_probs(const PairScoring& s, const TrainConfig& c,
                                      const std::vector<data::Example>& train,
                                      const std::vector<data::Example>& validation,
                                      int64_t global_batch);

struct PairEvaluation {
  double loss = 0;  // the objective's loss over all pairs (what training minimises)
  // Pairs whose chosen reward is above the rejected one's.
  std::optional<double> accuracy = std::nullopt;
  // Mean chosen reward minus rejected reward (kto: desirable and undesirable examples, when there
  // are both).
  std::optional<double> margin = std::nullopt;
  // Pairs whose chosen answer the model finds likelier per token than the rejected one: what a
  // person reads as "prefers the chosen answer" (about one half for a model that has not learnt).
  std::optional<double> preferred = std::nullopt;
  // kto: the KL estimate over all the examples, and the mean loss per completion token of the
  // desirable and of the undesirable completions (training lowers the first, raises the second).
  std::optional<double> kl = std::nullopt, desirable_loss = std::nullopt,
                        undesirable_loss = std::nullopt;
};
// `reference`: pair_log_probs of the same pairs (or kto's examples), when the objective uses one.
PairEvaluation evaluate_pairs(const PairScoring& s, const model::PreferenceObjective& objective,
                              const std::vector<data::Example>& pairs,
                              const torch::Tensor& reference);

// ORPO's NLL on a micro-batch of pairs: the next-token loss summed over every token of the chosen
// sequences, prompt included (differentiable, 0-dim); TRL averages it over those tokens
// (chosen_sequence_tokens).
torch::Tensor chosen_sequence_nll(model::CausalLMImpl& model, const torch::Tensor& hidden,
                                  const data::MicroBatch& pairs, int64_t chunk_rows);
int64_t chosen_sequence_tokens(const data::Example& pair);

// The reference values of the pairs `indices` in the order pair_batch lays them out: every chosen
// one, then every rejected one ([2N] fp64, host).
torch::Tensor reference_rows(const torch::Tensor& reference, const std::vector<size_t>& indices);

// kto's KL estimate for a step (model::kto_kl, on the device), from the KL sequences of this
// rank's micro-batches `micro` (example indices; every rank passes as many) and every other
// rank's, under the weights as they are, without gradients. `reference`: pair_log_probs of the
// examples (its second column, the KL sequences').
torch::Tensor kto_step_kl(const PairScoring& s, const std::vector<data::Example>& examples,
                          const std::vector<std::vector<size_t>>& micro,
                          const torch::Tensor& reference);

}  // namespace kubetune::train
