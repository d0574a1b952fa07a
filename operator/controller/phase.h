// status.phase of a FineTuneJob. The names are the schema's status.phase enum
// (common/finetunejob_schema.json) and the values of kubetune_operator_jobs' phase label
// (common/metrics/operator_series.h); tests/operator checks that the three agree.
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace kubetune::op {

enum class Phase {
  kNone,
  kPending,
  kCreated,
  kRunning,
  kRestarting,
  kSuspended,
  kSucceeded,
  kFailed
};

inline constexpr std::array<Phase, 7> kAllPhases = {
    Phase::kPending,   Phase::kCreated,   Phase::kRunning, Phase::kRestarting,
    Phase::kSuspended, Phase::kSucceeded, Phase::kFailed};

// "" for kNone (a job the operator has not seen yet).
std::string_view to_string(Phase phase);
// kNone for "" and for anything that is not a phase.
Phase parse_phase(std::string_view name);

inline bool is_finished(Phase phase) {
  return phase == Phase::kSucceeded || phase == Phase::kFailed;
}

}  // namespace kubetune::op
