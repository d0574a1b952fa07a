#pragma once
// Which of the supported formats a JSONL record is in, decided by its fields.

#include <nlohmann/json.hpp>
#include <optional>

#include "trainer/data/dataset.h"

namespace kubetune::data {

// Preference if the record has "chosen" and "rejected", Messages if it has "messages",
// UnpairedPreference if it has "prompt", "completion" and "label", PromptCompletion if it has
// "prompt" and "completion", Text if it has "text"; nullopt otherwise.
std::optional<Format> detect_format(const nlohmann::json& record);

// The format to encode `record` with: `requested` unless it is Auto, then the detected one.
// Throws std::runtime_error naming the expected fields when none is recognised.
Format resolve_format(const nlohmann::json& record, Format requested);

}  // namespace kubetune::data
