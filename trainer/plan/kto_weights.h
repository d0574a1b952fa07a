// KTOTrainer's advice on desirableWeight and undesirableWeight for a set with more examples of one
// kind than of the other (the bounds of Eq. 8 of the KTO paper, as TRL computes them).
#pragma once

#include <optional>
#include <string>

#include "common/finetunejob_types.h"
#include "trainer/data/dataset.h"

namespace kubetune::train {

// What to set when the weights are outside TRL's recommended range for these examples' counts;
// nothing when they are inside it or the two kinds are equally many.
std::optional<std::string> kto_weight_advice(const data::DatasetScan& train,
                                             const api::PreferenceConfig& weights);

}  // namespace kubetune::train
