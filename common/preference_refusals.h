// The refusals of preference data and objectives that do not go together, by the trainer
// (parse_train_config) and by the CRD's rules (operator/api/cel_rules.cpp): a preference objective
// reads pairs, pairs need one, and pairs are never packed.
#pragma once

namespace kubetune {

inline constexpr const char* kPreferenceObjectiveNeedsPairs =
    "training.objective dpo, ipo, simpo and orpo train on preference pairs: set data.format "
    "preference (or auto)";
inline constexpr const char* kPairsNeedPreferenceObjective =
    "data.format preference holds pairs for a preference objective: set training.objective to "
    "dpo, ipo, simpo or orpo";
inline constexpr const char* kLabelSmoothingBelowHalf =
    "training.preference.labelSmoothing is the probability that a pair's preference is wrong: it "
    "must be below 0.5";
inline constexpr const char* kPairsAreNotPacked =
    "preference pairs are padded, never packed (a pair is compared whole): set data.packing false";

}  // namespace kubetune
