#include "text/tokenizer_config.h"

#include <fstream>
#include <stdexcept>

#include "common/strict_json.h"

namespace kubetune::text {
namespace {

// Token fields are either a plain string or a serialised AddedToken {"content": ...}.
std::string token_name(const nlohmann::json& config, const char* field, const std::string& path) {
  if (!config.contains(field) || config[field].is_null()) return "";
  const auto& v = config[field];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  throw std::runtime_error(path + ": field \"" + field +
                           "\": expected a string or {\"content\": ...}");
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& dir) {
  TokenizerConfig c;
  const std::string path = dir + "/tokenizer_config.json";
  if (!std::ifstream(path)) return c;
  c.path = path;
  const nlohmann::json j = read_json_file_strict(path);
  if (!j.is_object()) throw std::runtime_error(path + ": expected a JSON object");
  c.bos_token = token_name(j, "bos_token", path);
  c.eos_token = token_name(j, "eos_token", path);
  c.pad_token = token_name(j, "pad_token", path);
  if (j.contains("chat_template")) c.chat_template = j["chat_template"];
  return c;
}

}  // namespace kubetune::text
