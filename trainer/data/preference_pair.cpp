#include "trainer/data/preference_pair.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/data/json_fields.h"

namespace kubetune::data {
namespace {

using Ids = std::vector<int32_t>;

size_t common_prefix(const Ids& a, const Ids& b) {
  const auto [end_a, end_b] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(end_a - a.begin());
}

// An answer is text to learn from: present, not empty.
void check_not_empty(const nlohmann::json& value, const std::string& name) {
  if ((value.is_string() && value.get_ref<const std::string&>().empty()) ||
      (value.is_array() && value.empty()))
    throw std::runtime_error("field \"" + name + "\": empty");
}

// The three sequences a pair is made of, tokenized whole: prompt, prompt + chosen, prompt +
// rejected.
struct Tokenized {
  Ids prompt, chosen, rejected;
};

Tokenized tokenize_strings(const std::string& prompt, std::string chosen, std::string rejected,
                           const text::Tokenizer& tokenizer) {
  const std::string eos = tokenizer.eos_token();
  if (eos.empty()) throw std::runtime_error("the tokenizer has no EOS token, which ends answers");
  for (std::string* answer : {&chosen, &rejected})
    if (answer->size() < eos.size() ||
        answer->compare(answer->size() - eos.size(), eos.size(), eos) != 0)
      *answer += eos;
  return {tokenizer.encode(prompt, true), tokenizer.encode(prompt + chosen, true),
          tokenizer.encode(prompt + rejected, true)};
}

Tokenized tokenize_conversations(const nlohmann::json& prompt, const nlohmann::json& chosen,
                                 const nlohmann::json& rejected, const EncodeContext& context) {
  const text::ChatTemplate& chat = require_chat_template(context);
  validate_messages(prompt, "prompt");
  validate_messages(chosen, "chosen");
  validate_messages(rejected, "rejected");
  const text::Tokenizer& tokenizer = context.tokenizer;
  const nlohmann::json extra = template_variables(tokenizer);
  auto render = [&](const nlohmann::json& answer) {
    nlohmann::json messages = prompt;
    messages.insert(messages.end(), answer.begin(), answer.end());
    // Templates write BOS themselves, so the tokenizer must not add it again.
    return tokenizer.encode(chat.render(messages, false, extra), false);
  };
  return {tokenizer.encode(chat.render(prompt, true, extra), false), render(chosen),
          render(rejected)};
}

Example with_targets_after(Ids ids, size_t prompt_tokens, size_t line) {
  Example example;
  example.labels = ids;
  std::fill(example.labels.begin(), example.labels.begin() + prompt_tokens, kIgnoreIndex);
  example.input_ids = std::move(ids);
  example.source_line = line;
  return example;
}

}  // namespace

Example encode_preference(const nlohmann::json& record, const EncodeContext& context) {
  const nlohmann::json& prompt = require_field(record, "prompt", "prompt");
  const nlohmann::json& chosen = require_field(record, "chosen", "chosen");
  const nlohmann::json& rejected = require_field(record, "rejected", "rejected");
  for (const auto& [value, name] : {std::pair{&prompt, "prompt"}, std::pair{&chosen, "chosen"},
                                    std::pair{&rejected, "rejected"}}) {
    if (!value->is_string() && !value->is_array())
      throw std::runtime_error(std::string("field \"") + name +
                               "\": expected a string or a list of messages, got " +
                               value->type_name());
    check_not_empty(*value, name);
  }
  if (!(prompt.is_string() == chosen.is_string() && chosen.is_string() == rejected.is_string()))
    throw std::runtime_error(
        "fields \"prompt\", \"chosen\" and \"rejected\": must all be strings or all be message "
        "lists");
  if (chosen == rejected)
    throw std::runtime_error(
        "fields \"chosen\" and \"rejected\": the same answer, so there is nothing to prefer");
  const Tokenized t = prompt.is_string()
                          ? tokenize_strings(prompt.get<std::string>(), chosen.get<std::string>(),
                                             rejected.get<std::string>(), context.tokenizer)
                          : tokenize_conversations(prompt, chosen, rejected, context);
  const size_t shared =
      std::min(common_prefix(t.prompt, t.chosen), common_prefix(t.prompt, t.rejected));
  if (shared >= t.chosen.size() || shared >= t.rejected.size())
    throw std::runtime_error("fields \"chosen\" and \"rejected\": an answer has no tokens");
  if (t.chosen == t.rejected)
    throw std::runtime_error(
        "fields \"chosen\" and \"rejected\": the same tokens, so there is nothing to prefer");
  Example pair = with_targets_after(t.chosen, shared, 0);
  pair.rejected = std::make_shared<const Example>(with_targets_after(t.rejected, shared, 0));
  return pair;
}

size_t prompt_length(const Example& example) {
  const auto first = std::find_if(example.labels.begin(), example.labels.end(),
                                  [](int32_t label) { return label != kIgnoreIndex; });
  return static_cast<size_t>(first - example.labels.begin());
}

}  // namespace kubetune::data
