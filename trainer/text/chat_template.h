// Renders Hugging Face chat templates (Jinja) exactly like transformers' apply_chat_template(
// tokenize=False): trim_blocks + lstrip_blocks, raise_exception, strftime_now, namespace(), and
// transformers' tojson. Templates are parsed once; unsupported constructs fail at load time.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::text {

class ChatTemplate {
 public:
  // tokenizer_config.json "chat_template" (a string, or a list of {name, template}: takes
  // "default"), else dir/chat_template.jinja. bos_token/eos_token also come from
  // tokenizer_config.json.
  static ChatTemplate from_dir(const std::string& dir);
  static ChatTemplate from_string(std::string source);

  // messages: JSON array of {"role","content"}; variables: messages, add_generation_prompt,
  // bos_token, eos_token (when known), tools=None, documents=None, then everything in `extra`
  // (which overrides). Throws std::runtime_error with the template line/column on errors; a
  // template's raise_exception('msg') throws with exactly 'msg'.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  static ChatTemplate compile(std::string source, std::string origin, std::string bos,
                              std::string eos);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace kubetune::text
