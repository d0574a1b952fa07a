#include "trainer/plan/kto_weights.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kubetune::train {
namespace {

double round2(double x) { return std::round(x * 100) / 100; }

}  // namespace

std::optional<std::string> kto_weight_advice(const data::DatasetScan& train,
                                             const api::PreferenceConfig& weights) {
  double desirable = 0;
  for (const auto& e : train.examples) desirable += e.desirable ? 1 : 0;
  const double total = static_cast<double>(train.examples.size());
  desirable = std::max(desirable, 1.0);
  const double undesirable = std::max(total - desirable, 1.0);
  if (desirable == undesirable) return std::nullopt;
  const double d = weights.desirable_weight, u = weights.undesirable_weight;
  const double d_low = round2(undesirable * u / desirable),
               d_high = round2(undesirable * u / desirable * 1.33);
  const double u_low = round2(desirable * d / undesirable / 1.33),
               u_high = round2(desirable * d / undesirable);
  if ((d_low <= d && d <= d_high) || (u_low <= u && u <= u_high)) return std::nullopt;
  std::ostringstream advice;
  advice << "data.train has " << desirable << " desirable and " << undesirable
         << " undesirable examples: KTO's paper and TRL recommend EITHER "
            "training.preference.desirableWeight in ["
         << d_low << ", " << d_high << "] OR undesirableWeight in [" << u_low << ", " << u_high
         << "] (not both), so that each kind weighs about as much in the loss";
  return advice.str();
}

}  // namespace kubetune::train
