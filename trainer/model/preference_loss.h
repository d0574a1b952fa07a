// The preference objectives (training.objective dpo, ipo, simpo, orpo) on a micro-batch's pairs,
// as TRL 1.x computes them: DPOTrainer (loss types sigmoid, hinge, robust, ipo), CPOTrainer's
// simpo (cpo_alpha 0) and ORPOTrainer. Inputs are per-sequence log-probabilities
// (loss.h: sequence_log_probs), chosen rows first.
#pragma once

#include <ATen/core/Tensor.h>

#include "common/finetunejob_types.h"

namespace kubetune::model {

struct PreferenceObjective {
  api::TrainingObjective objective = api::TrainingObjective::kDpo;
  api::PreferenceConfig config;
  // dpo and ipo compare the policy with a reference model; simpo and orpo need none.
  bool uses_reference() const;
  // orpo adds the chosen sequences' next-token loss, over every token, prompt included (TRL's
  // ORPOTrainer); the caller computes it (loss.h: next_token_loss_sum).
  bool adds_chosen_nll() const { return objective == api::TrainingObjective::kOrpo; }
};

// The sums over a micro-batch's pairs that TRL logs as means (rewards/chosen, rewards/rejected,
// rewards/accuracies, logps/chosen, logps/rejected), in this order.
enum PreferenceStat : int64_t {
  kChosenReward,
  kRejectedReward,
  kCorrectPairs,
  kChosenLogProb,
  kRejectedLogProb,
  kPreferenceStats
};

struct PreferenceTerms {
  at::Tensor pair_loss_sum;  // 0-dim fp32, differentiable: the per-pair losses, summed
  at::Tensor stats;          // [kPreferenceStats] fp64, detached
};

// log_probs [2N]: each sequence's summed target log-probabilities; targets [2N] its target count;
// reference [2N] the reference model's log_probs (read when uses_reference()). All on one device.
PreferenceTerms preference_terms(const PreferenceObjective& o, const at::Tensor& log_probs,
                                 const at::Tensor& targets, const at::Tensor& reference);

}  // namespace kubetune::model
