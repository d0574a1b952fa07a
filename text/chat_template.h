// Renders Hugging Face chat templates (Jinja) exactly like transformers' apply_chat_template(
// tokenize=False): trim_blocks + lstrip_blocks, raise_exception, strftime_now, namespace(), and
// transformers' tojson. Templates are parsed once; unsupported constructs fail at load time.
// Templates come with downloaded models, so rendering runs sandboxed (jinja/sandbox.h): hostile
// recursion, loops or nesting end in an error, never a crash or a hang.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::text {

struct TokenizerConfig;

class ChatTemplate {
 public:
  // tokenizer_config.json "chat_template" (a string, or a list of {name, template}: takes
  // "default"), else dir/chat_template.jinja. bos_token/eos_token also come from
  // tokenizer_config.json. Throws only when the folder has no template at all: a template that is
  // there but broken (a syntax error, a bad "chat_template" field) yields a ChatTemplate whose
  // render() throws that error ("<file>: chat template line L, column C: ..."), so that callers
  // treating a throw as "no template" do not hide it.
  static ChatTemplate from_dir(const std::string& dir);
  static ChatTemplate from_string(std::string source);

  // messages: JSON array of {"role","content"}; variables: messages, add_generation_prompt,
  // bos_token, eos_token (when known), tools=None, documents=None, then everything in `extra`
  // (which overrides). Throws std::runtime_error with the template line/column on errors (sandbox
  // limits included); a template's raise_exception('msg') throws with exactly 'msg'.
  std::string render(const nlohmann::json& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  static ChatTemplate compile(std::string source, std::string origin, std::string bos,
                              std::string eos);
  static ChatTemplate load(const std::string& dir, const TokenizerConfig& config);
  std::shared_ptr<const Impl> impl_;
};

}  // namespace kubetune::text
