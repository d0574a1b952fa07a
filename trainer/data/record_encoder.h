#pragma once
// Turns one JSON record into token ids and loss labels (before truncation).

#include <nlohmann/json.hpp>

#include "trainer/data/dataset.h"
#include "trainer/data/example.h"

namespace kubetune::data {

struct EncodeContext {
  const text::Tokenizer& tokenizer;
  const text::ChatTemplate* chat;  // null when the tokenizer folder has no chat template
  LossOn loss_on;
};

// A conversation's messages, {"role": string, "content": string, ...}, in a non-empty list; other
// keys (tool calls, names) pass through to the template untouched. Throws naming `name`[i].
void validate_messages(const nlohmann::json& messages, const std::string& name);
// The tokenizer folder's chat template; throws when it has none.
const text::ChatTemplate& require_chat_template(const EncodeContext& context);
// What chat templates read besides the messages: bos_token, eos_token.
nlohmann::json template_variables(const text::Tokenizer& tokenizer);

// `format` must not be Auto. Errors throw std::runtime_error without a location; the caller
// prefixes "path:LINE: ". The returned example's source_line is not set.
Example encode_record(const nlohmann::json& record, Format format, const EncodeContext& context);

}  // namespace kubetune::data
