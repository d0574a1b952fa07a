#pragma once
// Preference records as token ids, the way TRL tokenizes them: a pair {"prompt", "chosen",
// "rejected"} as DPOTrainer._prepare_dataset does (trl 1.x), and an unpaired example {"prompt",
// "completion", "label"} as KTOTrainer's does, the completion being its one answer:
//   - strings: EOS is appended to each answer unless it ends with it; the prompt is tokenized as
//     the tokenizer does by default (with BOS where it adds one), and so is prompt + answer;
//   - message lists: the chat template renders the prompt with the generation prompt, and the
//     prompt followed by each answer's messages;
//   - the answers start where the prompt's tokens and each prompt + answer's tokens first differ
//     (the shorter of the two common prefixes), so a merge across the boundary is an answer token.
// The answers' tokens are the targets; the prompt's are not.

#include <nlohmann/json.hpp>
#include <vector>

#include "trainer/data/example.h"
#include "trainer/data/record_encoder.h"

namespace kubetune::data {

// The chosen sequence, its `rejected` the other. Errors throw std::runtime_error naming the field
// (a missing or empty field, a prompt that is a string where the answers are lists, a chosen answer
// equal to the rejected one); the caller adds "path:LINE: ".
Example encode_preference(const nlohmann::json& record, const EncodeContext& context);

// An unpaired example (training.objective kto): the prompt and completion, `desirable` the label
// (a JSON boolean, as TRL requires). Errors as encode_preference's.
Example encode_unpaired_preference(const nlohmann::json& record, const EncodeContext& context);

// Prompt tokens of a pair or an unpaired example: the positions before its first target.
size_t prompt_length(const Example& example);

// KTO's KL sequences, as KTOTrainer builds them: within each block of `block` consecutive
// examples, example i's prompt followed by the completion of example i - 1 (the first takes the
// block's last), cut to `max_length` tokens; each becomes that example's `rejected`. With blocks
// of the global batch in file order, a step of an unshuffled run estimates the KL term from its
// own completions, each under another prompt (TRL's sequential sampling).
void attach_kl_sequences(std::vector<Example>& examples, size_t block, int max_length);

}  // namespace kubetune::data
