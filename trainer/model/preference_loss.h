// The preference objectives (training.objective dpo, ipo, simpo, orpo, kto) on a micro-batch, as
// TRL 1.x computes them: DPOTrainer (loss types sigmoid, hinge, robust, ipo), CPOTrainer's simpo
// (cpo_alpha 0), ORPOTrainer and KTOTrainer (loss_type kto). Inputs are per-sequence
// log-probabilities (loss.h: sequence_log_probs): a pair's chosen rows first, or kto's completions.
#pragma once

#include <ATen/core/Tensor.h>

#include "common/finetunejob_types.h"

namespace kubetune::model {

struct PreferenceObjective {
  api::TrainingObjective objective = api::TrainingObjective::kDpo;
  api::PreferenceConfig config;
  // dpo, ipo and kto compare the policy with a reference model; simpo and orpo need none.
  bool uses_reference() const;
  // kto trains on unpaired examples, each desirable or not, rather than on pairs.
  bool unpaired() const { return objective == api::TrainingObjective::kKto; }
  // orpo adds the chosen sequences' next-token loss, over every token, prompt included (TRL's
  // ORPOTrainer); the caller computes it (loss.h: next_token_loss_sum).
  bool adds_chosen_nll() const { return objective == api::TrainingObjective::kOrpo; }
};

// The sums over a micro-batch that TRL logs as means (rewards/chosen, rewards/rejected,
// rewards/accuracies, logps/chosen, logps/rejected), in this order, then what they are means over:
// the chosen and the rejected answers (each the pairs; kto: the desirable and the undesirable
// examples).
enum PreferenceStat : int64_t {
  kChosenReward,
  kRejectedReward,
  kCorrectPairs,
  kChosenLogProb,
  kRejectedLogProb,
  kChosenCount,
  kRejectedCount,
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

// kto on unpaired examples: log_probs [N] each completion's summed target log-probabilities,
// reference [N] the reference model's, desirable [N] bool, kl the step's KL estimate (0-dim,
// detached: kto_kl). A desirable example's loss is 1 - sigmoid(beta (log-ratio - kl)), an
// undesirable one's 1 - sigmoid(beta (kl - log-ratio)), weighted by desirableWeight and
// undesirableWeight; kCorrectPairs stays 0 (TRL logs no accuracy for kto).
PreferenceTerms kto_terms(const PreferenceObjective& o, const at::Tensor& log_probs,
                          const at::Tensor& reference, const at::Tensor& desirable,
                          const at::Tensor& kl);

// KTOTrainer's KL estimate from its KL sequences (each prompt with another example's completion):
// the mean of policy minus reference log-probabilities, clamped at 0. `sums` is [sum of the
// differences, sequences] over the step's whole batch.
at::Tensor kto_kl(const at::Tensor& sums);

}  // namespace kubetune::model
