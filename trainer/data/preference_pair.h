#pragma once
// A preference pair {"prompt", "chosen", "rejected"} as token ids, the way TRL's DPOTrainer
// tokenizes it (trl 1.x, DPOTrainer._prepare_dataset):
//   - strings: EOS is appended to each answer unless it ends with it; the prompt is tokenized as
//     the tokenizer does by default (with BOS where it adds one), and so is prompt + answer;
//   - message lists: the chat template renders the prompt with the generation prompt, and the
//     prompt followed by each answer's messages;
//   - the answers start where the prompt's tokens and each prompt + answer's tokens first differ
//     (the shorter of the two common prefixes), so a merge across the boundary is an answer token.
// The answers' tokens are the targets; the prompt's are not.

#include <nlohmann/json.hpp>

#include "trainer/data/example.h"
#include "trainer/data/record_encoder.h"

namespace kubetune::data {

// The chosen sequence, its `rejected` the other. Errors throw std::runtime_error naming the field
// (a missing or empty field, a prompt that is a string where the answers are lists, a chosen answer
// equal to the rejected one); the caller adds "path:LINE: ".
Example encode_preference(const nlohmann::json& record, const EncodeContext& context);

// Prompt tokens of a pair: the positions before its first target.
size_t prompt_length(const Example& example);

}  // namespace kubetune::data
