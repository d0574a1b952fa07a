#include "trainer/data/record_encoder.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "trainer/data/chat_masking.h"
#include "trainer/data/json_fields.h"
#include "trainer/data/preference_pair.h"

namespace kubetune::data {
namespace {

int32_t eos_id(const text::Tokenizer& tokenizer) {
  const auto eos = tokenizer.eos_id();
  if (!eos) throw std::runtime_error("the tokenizer has no EOS token, which ends every example");
  return *eos;
}

// Appends EOS so the model learns to stop, unless the text already ended with it.
void append_eos(std::vector<int32_t>& ids, int32_t eos) {
  if (ids.empty() || ids.back() != eos) ids.push_back(eos);
}

// A conversation; messages before `first_target` are context only (the prompt of a
// conversational prompt/completion record).
Example encode_conversation(const nlohmann::json& messages, size_t first_target,
                            const EncodeContext& context) {
  const text::ChatTemplate& chat = require_chat_template(context);
  const text::Tokenizer& tokenizer = context.tokenizer;
  const nlohmann::json extra = template_variables(tokenizer);
  const std::string full = chat.render(messages, false, extra);
  // Templates write BOS themselves, so the tokenizer must not add it again.
  text::Encoding encoding = tokenizer.encode_with_offsets(full, false);

  Example example;
  if (context.loss_on == LossOn::kAll) {
    example.labels = encoding.ids;
  } else {
    const auto spans = assistant_spans(*context.chat, messages, first_target, extra, full);
    if (spans.empty()) {
      throw std::runtime_error(first_target == 0
                                   ? "conversation has no assistant message to train on"
                                   : "field \"completion\": has no assistant message to train on");
    }
    example.labels = labels_in_spans(encoding, spans);
  }
  example.input_ids = std::move(encoding.ids);
  return example;
}

Example encode_messages(const nlohmann::json& record, const EncodeContext& context) {
  const nlohmann::json& messages = require_field(record, "messages", "messages");
  validate_messages(messages, "messages");
  return encode_conversation(messages, 0, context);
}

// {"prompt": [...], "completion": [...]}: the conversation is prompt ++ completion, and only the
// completion's assistant turns are targets (TRL's completion-only loss).
Example encode_conversational_completion(const nlohmann::json& prompt,
                                         const nlohmann::json& completion,
                                         const EncodeContext& context) {
  validate_messages(prompt, "prompt");
  validate_messages(completion, "completion");
  nlohmann::json messages = prompt;
  messages.insert(messages.end(), completion.begin(), completion.end());
  return encode_conversation(messages, prompt.size(), context);
}

Example encode_prompt_completion(const nlohmann::json& record, const EncodeContext& context) {
  const nlohmann::json& prompt = require_field(record, "prompt", "prompt");
  const nlohmann::json& completion = require_field(record, "completion", "completion");
  if (prompt.is_array() && completion.is_array()) {
    return encode_conversational_completion(prompt, completion, context);
  }
  if (prompt.is_array() || completion.is_array()) {
    throw std::runtime_error(
        "fields \"prompt\" and \"completion\": must both be strings or both be message lists");
  }
  const text::Tokenizer& tokenizer = context.tokenizer;
  const int32_t eos = eos_id(tokenizer);
  Example example;
  example.input_ids = tokenizer.encode(require_string(prompt, "prompt"), true);
  const size_t prompt_length = example.input_ids.size();
  const auto completion_ids = tokenizer.encode(require_string(completion, "completion"), false);
  example.input_ids.insert(example.input_ids.end(), completion_ids.begin(), completion_ids.end());
  append_eos(example.input_ids, eos);

  example.labels = example.input_ids;
  if (context.loss_on == LossOn::kCompletion) {
    std::fill(example.labels.begin(), example.labels.begin() + prompt_length, kIgnoreIndex);
  }
  return example;
}

// Plain text is language-modelling data: every token is a target whatever loss_on says.
Example encode_text(const nlohmann::json& record, const EncodeContext& context) {
  const std::string& text = require_string(require_field(record, "text", "text"), "text");
  Example example;
  example.input_ids = context.tokenizer.encode(text, true);
  append_eos(example.input_ids, eos_id(context.tokenizer));
  example.labels = example.input_ids;
  return example;
}

}  // namespace

// Each message is {"role": string, "content": string, ...}; other keys (tool calls, names)
// are passed through to the template untouched.
void validate_messages(const nlohmann::json& messages, const std::string& name) {
  require_array(messages, name);
  if (messages.empty()) throw std::runtime_error("field \"" + name + "\": empty conversation");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string item = name + "[" + std::to_string(i) + "]";
    if (!messages[i].is_object()) {
      throw std::runtime_error("field \"" + item + "\": expected an object, got " +
                               messages[i].type_name());
    }
    require_string(require_field(messages[i], "role", item + ".role"), item + ".role");
    require_string(require_field(messages[i], "content", item + ".content"), item + ".content");
  }
}

const text::ChatTemplate& require_chat_template(const EncodeContext& context) {
  if (context.chat == nullptr)
    throw std::runtime_error(
        "conversation records need a chat template, but the tokenizer folder has none "
        "(chat_template in tokenizer_config.json or chat_template.jinja)");
  return *context.chat;
}

nlohmann::json template_variables(const text::Tokenizer& tokenizer) {
  return {{"bos_token", tokenizer.bos_token()}, {"eos_token", tokenizer.eos_token()}};
}

Example encode_record(const nlohmann::json& record, Format format, const EncodeContext& context) {
  switch (format) {
    case Format::kMessages:
      return encode_messages(record, context);
    case Format::kPromptCompletion:
      return encode_prompt_completion(record, context);
    case Format::kText:
      return encode_text(record, context);
    case Format::kPreference:
      return encode_preference(record, context);
    case Format::kUnpairedPreference:
      return encode_unpaired_preference(record, context);
    case Format::kAuto:
    case Format::kSharegpt:  // read as messages or prompt_completion first (column_mapping.h)
    case Format::kAlpaca:
      break;
  }
  throw std::logic_error("encode_record: the format must be resolved before encoding");
}

}  // namespace kubetune::data
