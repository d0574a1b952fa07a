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

// A prompt and its answers tokenized whole: the prompt alone, then the prompt followed by each
// answer.
struct Tokenized {
  Ids prompt;
  std::vector<Ids> answered;
};

Tokenized tokenize_strings(const std::string& prompt, std::vector<std::string> answers,
                           const text::Tokenizer& tokenizer) {
  const std::string eos = tokenizer.eos_token();
  if (eos.empty()) throw std::runtime_error("the tokenizer has no EOS token, which ends answers");
  Tokenized t{tokenizer.encode(prompt, true), {}};
  for (std::string& answer : answers) {
    if (answer.size() < eos.size() ||
        answer.compare(answer.size() - eos.size(), eos.size(), eos) != 0)
      answer += eos;
    t.answered.push_back(tokenizer.encode(prompt + answer, true));
  }
  return t;
}

// `answers`: each answer's messages and the field it came from.
Tokenized tokenize_conversations(
    const nlohmann::json& prompt,
    const std::vector<std::pair<const nlohmann::json*, const char*>>& answers,
    const EncodeContext& context) {
  const text::ChatTemplate& chat = require_chat_template(context);
  validate_messages(prompt, "prompt");
  for (const auto& [answer, name] : answers) validate_messages(*answer, name);
  const text::Tokenizer& tokenizer = context.tokenizer;
  const nlohmann::json extra = template_variables(tokenizer);
  // Templates write BOS themselves, so the tokenizer must not add it again.
  Tokenized t{tokenizer.encode(chat.render(prompt, true, extra), false), {}};
  for (const auto& [answer, name] : answers) {
    nlohmann::json messages = prompt;
    messages.insert(messages.end(), answer->begin(), answer->end());
    t.answered.push_back(tokenizer.encode(chat.render(messages, false, extra), false));
  }
  return t;
}

// The prompt and answer fields of a record, checked alike: each a string or a message list, not
// empty, and all of one kind. Returns them tokenized.
Tokenized tokenize_record(const nlohmann::json& record, const std::vector<const char*>& answers,
                          const EncodeContext& context) {
  std::vector<std::pair<const nlohmann::json*, const char*>> fields = {
      {&require_field(record, "prompt", "prompt"), "prompt"}};
  for (const char* name : answers) fields.push_back({&require_field(record, name, name), name});
  bool strings = true, lists = true;
  std::string names;
  for (const auto& [value, name] : fields) {
    if (!value->is_string() && !value->is_array())
      throw std::runtime_error(std::string("field \"") + name +
                               "\": expected a string or a list of messages, got " +
                               value->type_name());
    check_not_empty(*value, name);
    strings = strings && value->is_string();
    lists = lists && value->is_array();
    names += std::string(names.empty() ? "" : ", ") + "\"" + name + "\"";
  }
  if (!strings && !lists)
    throw std::runtime_error("fields " + names + ": must all be strings or all be message lists");
  const nlohmann::json& prompt = *fields.front().first;
  fields.erase(fields.begin());
  if (lists) return tokenize_conversations(prompt, fields, context);
  std::vector<std::string> texts;
  for (const auto& field : fields) texts.push_back(field.first->get<std::string>());
  return tokenize_strings(prompt.get<std::string>(), texts, context.tokenizer);
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
  if (require_field(record, "chosen", "chosen") == require_field(record, "rejected", "rejected"))
    throw std::runtime_error(
        "fields \"chosen\" and \"rejected\": the same answer, so there is nothing to prefer");
  const Tokenized t = tokenize_record(record, {"chosen", "rejected"}, context);
  const Ids &chosen = t.answered[0], &rejected = t.answered[1];
  const size_t shared =
      std::min(common_prefix(t.prompt, chosen), common_prefix(t.prompt, rejected));
  if (shared >= chosen.size() || shared >= rejected.size())
    throw std::runtime_error("fields \"chosen\" and \"rejected\": an answer has no tokens");
  if (chosen == rejected)
    throw std::runtime_error(
        "fields \"chosen\" and \"rejected\": the same tokens, so there is nothing to prefer");
  Example pair = with_targets_after(chosen, shared, 0);
  pair.rejected = std::make_shared<const Example>(with_targets_after(rejected, shared, 0));
  return pair;
}

Example encode_unpaired_preference(const nlohmann::json& record, const EncodeContext& context) {
  const nlohmann::json& label = require_field(record, "label", "label");
  if (!label.is_boolean())
    throw std::runtime_error(std::string("field \"label\": expected true (a desirable "
                                         "completion) or false (an undesirable one), got ") +
                             (label.is_string() ? "\"" + label.get<std::string>() + "\""
                                                : std::string(label.type_name())));
  const Tokenized t = tokenize_record(record, {"completion"}, context);
  const Ids& completed = t.answered[0];
  const size_t shared = common_prefix(t.prompt, completed);
  if (shared >= completed.size())
    throw std::runtime_error("field \"completion\": no tokens after the prompt's");
  Example example = with_targets_after(completed, shared, 0);
  example.desirable = label.get<bool>();
  return example;
}

size_t prompt_length(const Example& example) {
  const auto first = std::find_if(example.labels.begin(), example.labels.end(),
                                  [](int32_t label) { return label != kIgnoreIndex; });
  return static_cast<size_t>(first - example.labels.begin());
}

void attach_kl_sequences(std::vector<Example>& examples, size_t block, int max_length) {
  if (block == 0) throw std::invalid_argument("attach_kl_sequences: a block of no examples");
  std::vector<size_t> prompts;
  for (const Example& e : examples) prompts.push_back(prompt_length(e));
  for (size_t begin = 0; begin < examples.size(); begin += block) {
    const size_t end = std::min(examples.size(), begin + block);
    for (size_t i = begin; i < end; ++i) {
      // (x_1, y_n), (x_2, y_1), ..., (x_n, y_(n-1)): the completion of the example before.
      const size_t other = i == begin ? end - 1 : i - 1;
      const Example& from = examples[other];
      Example kl = with_targets_after(
          Ids(examples[i].input_ids.begin(),
              examples[i].input_ids.begin() + static_cast<std::ptrdiff_t>(prompts[i])),
          prompts[i], examples[i].source_line);
      kl.input_ids.insert(kl.input_ids.end(),
                          from.input_ids.begin() + static_cast<std::ptrdiff_t>(prompts[other]),
                          from.input_ids.end());
      kl.labels.insert(kl.labels.end(),
                       from.labels.begin() + static_cast<std::ptrdiff_t>(prompts[other]),
                       from.labels.end());
      if (kl.input_ids.size() > static_cast<size_t>(max_length)) {
        kl.input_ids.resize(static_cast<size_t>(max_length));
        kl.labels.resize(static_cast<size_t>(max_length));
      }
      examples[i].rejected = std::make_shared<const Example>(std::move(kl));
    }
  }
}

}  // namespace kubetune::data
