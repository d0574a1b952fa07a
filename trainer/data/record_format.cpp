#include "trainer/data/record_format.h"

#include <stdexcept>
#include <string>

namespace kubetune::data {
namespace {

std::string keys_of(const nlohmann::json& record) {
  std::string keys;
  for (const auto& item : record.items()) {
    if (!keys.empty()) keys += ", ";
    keys += "\"" + item.key() + "\"";
  }
  return keys.empty() ? "none" : keys;
}

}  // namespace

std::optional<Format> detect_format(const nlohmann::json& record) {
  if (record.contains("chosen") && record.contains("rejected")) return Format::kPreference;
  if (record.contains("messages")) return Format::kMessages;
  if (record.contains("prompt") && record.contains("completion") && record.contains("label"))
    return Format::kUnpairedPreference;
  if (record.contains("prompt") && record.contains("completion")) return Format::kPromptCompletion;
  if (record.contains("text")) return Format::kText;
  return std::nullopt;
}

Format resolve_format(const nlohmann::json& record, Format requested) {
  if (requested != Format::kAuto) return requested;
  if (const auto detected = detect_format(record)) return *detected;
  throw std::runtime_error(
      "unknown record format: expected a \"messages\" field, \"prompt\" and \"completion\" "
      "fields, a \"text\" field, \"prompt\", \"chosen\" and \"rejected\" fields, or \"prompt\", "
      "\"completion\" and \"label\" fields; the record "
      "has fields " +
      keys_of(record));
}

}  // namespace kubetune::data
