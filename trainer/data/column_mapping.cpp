#include "trainer/data/column_mapping.h"

#include <array>
#include <stdexcept>

namespace kubetune::data {
namespace {

std::string field_names(const nlohmann::json& record) {
  std::string names;
  for (const auto& item : record.items())
    names += (names.empty() ? "\"" : ", \"") + item.key() + "\"";
  return names.empty() ? "none" : names;
}

// Unsloth's standardize_sharegpt aliases; any other role is refused rather than guessed.
std::string chat_role(const std::string& from) {
  for (const char* user : {"human", "user", "input"})
    if (from == user) return "user";
  for (const char* assistant : {"gpt", "assistant", "output"})
    if (from == assistant) return "assistant";
  if (from == "system") return "system";
  throw std::runtime_error("role \"" + from +
                           "\": not a ShareGPT role (human, user or input; gpt, assistant or "
                           "output; system)");
}

nlohmann::json sharegpt_messages(nlohmann::json record) {
  const char* key = record.contains("messages") ? "messages" : "conversations";
  if (!record.contains(key))
    throw std::runtime_error(
        "field \"conversations\": missing (data.format sharegpt; data.columns.messages names "
        "another column); the record has fields " +
        field_names(record));
  nlohmann::json& turns = record[key];
  if (!turns.is_array() || turns.empty())
    throw std::runtime_error(std::string("field \"") + key + "\": expected a non-empty list");
  nlohmann::json messages = nlohmann::json::array();
  for (size_t i = 0; i < turns.size(); ++i) {
    nlohmann::json turn = turns[i];
    const std::string where = std::string(key) + "[" + std::to_string(i) + "]";
    if (!turn.is_object() || !turn.contains("from") || !turn["from"].is_string() ||
        !turn.contains("value"))
      throw std::runtime_error("field \"" + where +
                               "\": expected {\"from\": role, \"value\": text}");
    try {
      turn["role"] = chat_role(turn["from"].get<std::string>());
    } catch (const std::exception& e) {
      throw std::runtime_error("field \"" + where + "\": " + e.what());
    }
    turn["content"] = turn["value"];
    turn.erase("from");
    turn.erase("value");
    messages.push_back(std::move(turn));
  }
  record.erase(key);
  record["messages"] = std::move(messages);
  return record;
}

nlohmann::json alpaca_prompt_completion(nlohmann::json record) {
  for (const char* field : {"instruction", "output"})
    if (!record.contains(field) || !record[field].is_string())
      throw std::runtime_error(std::string("field \"") + field +
                               "\": missing or not a string (data.format alpaca); the record has "
                               "fields " +
                               field_names(record));
  std::string user = record["instruction"].get<std::string>();
  if (record.contains("input") && !record["input"].is_null()) {
    if (!record["input"].is_string())
      throw std::runtime_error("field \"input\": expected a string");
    const std::string input = record["input"].get<std::string>();
    if (!input.empty()) user += "\n\n" + input;
  }
  return {{"prompt", {{{"role", "user"}, {"content", user}}}},
          {"completion", {{{"role", "assistant"}, {"content", record["output"]}}}}};
}

}  // namespace

ColumnMapping::ColumnMapping(Format format, const api::DataColumns& c) : requested_(format) {
  const std::array<std::pair<const char*, const std::optional<std::string>*>, 10> fields = {{
      {"messages", &c.messages},
      {"prompt", &c.prompt},
      {"completion", &c.completion},
      {"text", &c.text},
      {"chosen", &c.chosen},
      {"rejected", &c.rejected},
      {"label", &c.label},
      {"instruction", &c.instruction},
      {"input", &c.input},
      {"output", &c.output},
  }};
  for (const auto& [field, column] : fields)
    if (*column && **column != field) renames_.emplace_back(field, **column);
}

nlohmann::json ColumnMapping::apply(nlohmann::json record) const {
  if (!record.is_object()) return record;  // the format checks name it
  nlohmann::json renamed = record;
  for (const auto& [field, column] : renames_) {
    // alpaca's input is optional; every other named column must be there.
    if (!record.contains(column)) {
      if (field == "input") continue;
      throw std::runtime_error("column \"" + column + "\" (data.columns." + field +
                               "): missing; the record has fields " + field_names(record));
    }
    renamed.erase(column);
  }
  for (const auto& [field, column] : renames_)
    if (record.contains(column)) renamed[field] = record[column];
  if (requested_ == Format::kSharegpt) return sharegpt_messages(std::move(renamed));
  if (requested_ == Format::kAlpaca) return alpaca_prompt_completion(std::move(renamed));
  return renamed;
}

Format ColumnMapping::format() const {
  if (requested_ == Format::kSharegpt) return Format::kMessages;
  if (requested_ == Format::kAlpaca) return Format::kPromptCompletion;
  return requested_;
}

std::string ColumnMapping::describe() const {
  std::string out;
  for (const auto& [field, column] : renames_)
    out +=
        (out.empty() ? "" : ", ") + std::string("column \"") + column + "\" as \"" + field + "\"";
  std::string layout;
  if (requested_ == Format::kSharegpt)
    layout =
        "sharegpt: conversations[].from/value as messages[].role/content (human, user, input: "
        "user; gpt, assistant, output: assistant; system)";
  if (requested_ == Format::kAlpaca)
    layout =
        "alpaca: instruction (and input) as the user's prompt, output as the assistant's "
        "completion";
  if (!layout.empty()) out += (out.empty() ? "" : "; ") + layout;
  return out;
}

}  // namespace kubetune::data
