// The parts of tokenizer_config.json that the tokenizer and the chat template need.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::text {

struct TokenizerConfig {
  std::string path;                             // the file read ("" when the directory has none)
  std::string bos_token, eos_token, pad_token;  // "" when absent or null
  nlohmann::json chat_template;                 // string, list of {name, template}, or null
};

// Reads dir/tokenizer_config.json; a missing file yields an empty config.
TokenizerConfig read_tokenizer_config(const std::string& dir);

}  // namespace kubetune::text
