// The refusals of preference data and objectives that do not go together, by the trainer
// (parse_train_config) and by the CRD's rules (operator/api/cel_rules.cpp): a preference objective
// reads pairs (kto: unpaired examples), pairs need one, and neither is ever packed.
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
inline constexpr const char* kKtoNeedsUnpairedExamples =
    "training.objective kto trains on unpaired preference examples {prompt, completion, label}: "
    "set data.format unpaired_preference (or auto)";
inline constexpr const char* kUnpairedExamplesNeedKto =
    "data.format unpaired_preference holds examples for training.objective kto: set it";
inline constexpr const char* kKtoNeedsTwoExamplesPerStep =
    "training.objective kto estimates its KL term from the other examples of a step: "
    "training.globalBatchSize must be at least 2";
inline constexpr const char* kPairsAreNotPacked =
    "preference data is padded, never packed (each answer is scored whole): set data.packing false";

}  // namespace kubetune
