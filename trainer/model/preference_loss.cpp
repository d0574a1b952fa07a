#include "trainer/model/preference_loss.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

namespace kubetune::model {
namespace {

using Objective = api::TrainingObjective;

// log(1 - exp(x)) for x < 0, ORPO's log1mexp: branches at -ln 2 against cancellation.
at::Tensor log1mexp(const at::Tensor& x) {
  return at::where(x < -M_LN2, at::log1p(-at::exp(x)), at::log(-at::expm1(x)));
}

// -(1 - e) log sigmoid(z) - e log sigmoid(-z): the sigmoid loss with labels flipped with
// probability e (CPO/SimPO's conservative form; e = 0 is DPO's sigmoid loss).
at::Tensor smoothed_sigmoid_loss(const at::Tensor& z, double e) {
  return -at::log_sigmoid(z) * (1 - e) - at::log_sigmoid(-z) * e;
}

// Per pair: the loss, the two rewards, and the two log-probabilities TRL logs.
struct PairTerms {
  at::Tensor loss, chosen_reward, rejected_reward, chosen_logp, rejected_logp;
};

PairTerms dpo(const PreferenceObjective& o, const at::Tensor& chosen, const at::Tensor& rejected,
              const at::Tensor& chosen_ref, const at::Tensor& rejected_ref) {
  const double beta = o.config.beta, e = o.config.label_smoothing;
  const at::Tensor chosen_ratio = chosen - chosen_ref, rejected_ratio = rejected - rejected_ref;
  const at::Tensor z = beta * (chosen_ratio - rejected_ratio);
  at::Tensor loss;
  switch (o.config.dpo_loss) {
    case api::PreferenceConfigDpoLoss::kSigmoid:
      loss = -at::log_sigmoid(z);
      break;
    case api::PreferenceConfigDpoLoss::kHinge:
      loss = at::relu(1 - z);
      break;
    case api::PreferenceConfigDpoLoss::kRobust:
      loss = (-(1 - e) * at::log_sigmoid(z) + e * at::log_sigmoid(-z)) / (1 - 2 * e);
      break;
  }
  return {loss, beta * chosen_ratio, beta * rejected_ratio, chosen, rejected};
}

// IPO compares per-token averages of the log-ratios (TRL's reading of the paper, confirmed with
// its authors); the rewards it logs stay DPO's.
PairTerms ipo(const PreferenceObjective& o, const at::Tensor& chosen, const at::Tensor& rejected,
              const at::Tensor& chosen_ref, const at::Tensor& rejected_ref,
              const at::Tensor& chosen_targets, const at::Tensor& rejected_targets) {
  const double beta = o.config.beta;
  const at::Tensor chosen_ratio = chosen - chosen_ref, rejected_ratio = rejected - rejected_ref;
  const at::Tensor delta =
      chosen_ratio / chosen_targets.clamp_min(1) - rejected_ratio / rejected_targets.clamp_min(1);
  return {(delta - 1 / (2 * beta)).pow(2), beta * chosen_ratio, beta * rejected_ratio, chosen,
          rejected};
}

// SimPO: no reference; length-normalised log-probabilities, a margin gamma.
PairTerms simpo(const PreferenceObjective& o, const at::Tensor& chosen_mean,
                const at::Tensor& rejected_mean) {
  const double beta = o.config.beta;
  const at::Tensor z = beta * ((chosen_mean - rejected_mean) - o.config.simpo_gamma / beta);
  return {smoothed_sigmoid_loss(z, o.config.label_smoothing), beta * chosen_mean,
          beta * rejected_mean, chosen_mean, rejected_mean};
}

// ORPO's odds-ratio term on length-normalised log-probabilities (its NLL is the caller's).
PairTerms orpo(const PreferenceObjective& o, const at::Tensor& chosen_mean,
               const at::Tensor& rejected_mean) {
  const double beta = o.config.beta;
  const at::Tensor log_odds =
      (chosen_mean - rejected_mean) - (log1mexp(chosen_mean) - log1mexp(rejected_mean));
  return {-beta * at::log_sigmoid(log_odds), beta * chosen_mean, beta * rejected_mean, chosen_mean,
          rejected_mean};
}

}  // namespace

bool PreferenceObjective::uses_reference() const {
  return objective == Objective::kDpo || objective == Objective::kIpo ||
         objective == Objective::kKto;
}

PreferenceTerms preference_terms(const PreferenceObjective& o, const at::Tensor& log_probs,
                                 const at::Tensor& targets, const at::Tensor& reference) {
  TORCH_CHECK(log_probs.dim() == 1 && log_probs.size(0) % 2 == 0,
              "preference_terms: expected [2N] log-probabilities, chosen first");
  const int64_t n = log_probs.size(0) / 2;
  const at::Tensor lp = log_probs.to(at::kFloat), count = targets.to(lp.options());
  const at::Tensor chosen = lp.narrow(0, 0, n), rejected = lp.narrow(0, n, n);
  const at::Tensor chosen_targets = count.narrow(0, 0, n), rejected_targets = count.narrow(0, n, n);
  at::Tensor chosen_ref, rejected_ref;
  if (o.uses_reference()) {
    TORCH_CHECK(reference.defined() && reference.sizes() == log_probs.sizes(),
                "preference_terms: the reference log-probabilities are missing");
    const at::Tensor ref = reference.to(lp.options());
    chosen_ref = ref.narrow(0, 0, n);
    rejected_ref = ref.narrow(0, n, n);
  }
  // CPO and ORPO average over the targets unclamped: an answer always has one (preference_pair.h).
  const auto chosen_mean = [&] { return chosen / chosen_targets; };
  const auto rejected_mean = [&] { return rejected / rejected_targets; };
  PairTerms t;
  switch (o.objective) {
    case Objective::kDpo:
      t = dpo(o, chosen, rejected, chosen_ref, rejected_ref);
      break;
    case Objective::kIpo:
      t = ipo(o, chosen, rejected, chosen_ref, rejected_ref, chosen_targets, rejected_targets);
      break;
    case Objective::kSimpo:
      t = simpo(o, chosen_mean(), rejected_mean());
      break;
    case Objective::kOrpo:
      t = orpo(o, chosen_mean(), rejected_mean());
      break;
    case Objective::kSft:
    case Objective::kKto:
      throw std::logic_error("preference_terms: " + api::to_string(o.objective) +
                             " is not an objective on pairs");
  }
  PreferenceTerms terms;
  terms.pair_loss_sum = t.loss.sum();
  const auto total = [](const at::Tensor& v) { return v.detach().sum().to(at::kDouble); };
  terms.stats = at::stack({total(t.chosen_reward), total(t.rejected_reward),
                           total((t.chosen_reward > t.rejected_reward).to(at::kDouble)),
                           total(t.chosen_logp), total(t.rejected_logp),
                           at::full({}, static_cast<double>(n), lp.options().dtype(at::kDouble)),
                           at::full({}, static_cast<double>(n), lp.options().dtype(at::kDouble))});
  return terms;
}

PreferenceTerms kto_terms(const PreferenceObjective& o, const at::Tensor& log_probs,
                          const at::Tensor& reference, const at::Tensor& desirable,
                          const at::Tensor& kl) {
  TORCH_CHECK(log_probs.dim() == 1 && reference.sizes() == log_probs.sizes() &&
                  desirable.sizes() == log_probs.sizes(),
              "kto_terms: expected [N] log-probabilities, reference and labels");
  const double beta = o.config.beta;
  const at::Tensor lp = log_probs.to(at::kFloat);
  const at::Tensor ratio = lp - reference.to(lp.options());
  const at::Tensor good = desirable.to(at::kBool), shift = kl.to(lp.options());
  const at::Tensor loss =
      at::where(good, o.config.desirable_weight * (1 - at::sigmoid(beta * (ratio - shift))),
                o.config.undesirable_weight * (1 - at::sigmoid(beta * (shift - ratio))));
  PreferenceTerms terms;
  terms.pair_loss_sum = loss.sum();
  const at::Tensor reward = beta * ratio.detach(), weight = good.to(at::kDouble),
                   other = 1 - weight, logp = lp.detach().to(at::kDouble);
  const auto dot = [](const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kDouble) * b).sum();
  };
  terms.stats = at::stack({dot(reward, weight), dot(reward, other), at::zeros({}, weight.options()),
                           dot(logp, weight), dot(logp, other), weight.sum(), other.sum()});
  return terms;
}

at::Tensor kto_kl(const at::Tensor& sums) {
  return (sums[0] / sums[1].clamp_min(1)).clamp_min(0).to(at::kFloat);
}

}  // namespace kubetune::model
