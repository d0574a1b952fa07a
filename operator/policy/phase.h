// status.phase of a FineTuneJob: the generated api::Phase (the schema's status.phase enum), which
// is also the set of values of kubetune_operator_jobs' phase label
// (common/metrics/operator_series.h); tests/operator checks that they agree. A job the operator
// has not seen yet has no phase (std::nullopt).
#pragma once

#include <optional>

#include "common/finetunejob_types.h"

namespace kubetune::op {

using api::Phase;
inline constexpr const auto& kAllPhases = api::kPhaseValues;

inline bool is_finished(std::optional<Phase> phase) {
  return phase == Phase::kSucceeded || phase == Phase::kFailed;
}

}  // namespace kubetune::op
