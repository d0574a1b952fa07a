#include "text/chat_template.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "text/jinja/errors.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/parser.h"
#include "text/tokenizer_config.h"

namespace kubetune::text {

struct ChatTemplate::Impl {
  std::string source;
  std::string origin;  // "<file>: " prefix for error messages ("" for from_string)
  std::string bos, eos;
  jinja::Body program;
  std::string error;  // why a template from_dir found cannot be used ("" when it can)
};

ChatTemplate ChatTemplate::compile(std::string source, std::string origin, std::string bos,
                                   std::string eos) {
  auto impl = std::make_shared<Impl>();
  impl->source = std::move(source);
  impl->origin = std::move(origin);
  impl->bos = std::move(bos);
  impl->eos = std::move(eos);
  try {
    impl->program = jinja::parse(impl->source);
  } catch (const std::runtime_error& e) {
    // e.what() starts with "line L, column C: ", so the user reads
    // "<file>: chat template line L, column C: <problem>".
    throw std::runtime_error(impl->origin + "chat template " + e.what());
  }
  return ChatTemplate(std::move(impl));
}

ChatTemplate ChatTemplate::from_string(std::string source) {
  return compile(std::move(source), "", "", "");
}

namespace {

std::string jinja_file(const std::string& dir) { return dir + "/chat_template.jinja"; }

}  // namespace

ChatTemplate ChatTemplate::from_dir(const std::string& dir) {
  const TokenizerConfig config = read_tokenizer_config(dir);
  if (config.chat_template.is_null() && !std::ifstream(jinja_file(dir))) {
    throw std::runtime_error(dir +
                             ": no chat template (no \"chat_template\" in tokenizer_config.json "
                             "and no chat_template.jinja)");
  }
  // Callers take any exception from here to mean "no chat template" (a model folder needs one
  // only for conversation data), so a template that is there but broken must not throw: its
  // error, with file, line and column, is kept and thrown by render(), where it reaches the user.
  // transformers likewise compiles the template only when it is first applied.
  try {
    return load(dir, config);
  } catch (const std::exception& e) {  // json type errors in the "chat_template" field, too
    auto impl = std::make_shared<Impl>();
    impl->error = e.what();
    return ChatTemplate(std::move(impl));
  }
}

ChatTemplate ChatTemplate::load(const std::string& dir, const TokenizerConfig& config) {
  const auto& t = config.chat_template;
  if (t.is_string())
    return compile(t.get<std::string>(), config.path + ": ", config.bos_token, config.eos_token);
  if (t.is_array()) {
    std::string names;
    for (const auto& entry : t) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) {
        throw std::runtime_error(
            config.path + ": field \"chat_template\": list entries need \"name\" and \"template\"");
      }
      const auto name = entry["name"].get<std::string>();
      if (name == "default") {
        return compile(entry["template"].get<std::string>(), config.path + ": ", config.bos_token,
                       config.eos_token);
      }
      names += (names.empty() ? "" : ", ") + name;
    }
    throw std::runtime_error(
        config.path + ": field \"chat_template\": no template named \"default\" (have: " + names +
        ")");
  }
  if (!t.is_null())
    throw std::runtime_error(config.path +
                             ": field \"chat_template\": expected a string or a list");
  std::ifstream in(jinja_file(dir));
  if (!in) throw std::runtime_error(jinja_file(dir) + ": cannot read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return compile(buffer.str(), jinja_file(dir) + ": ", config.bos_token, config.eos_token);
}

const std::string& ChatTemplate::source() const { return impl_->source; }

std::string ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  if (!impl_->error.empty()) throw std::runtime_error(impl_->error);
  if (!messages.is_array())
    throw std::runtime_error("ChatTemplate::render: messages must be a JSON array");
  if (!extra.is_object())
    throw std::runtime_error("ChatTemplate::render: extra must be a JSON object");
  std::map<std::string, jinja::Value> vars;
  // transformers always passes tools/documents (None when absent) and the special tokens it knows.
  vars["messages"] = jinja::Value(jinja::Json(messages));
  vars["add_generation_prompt"] = jinja::Value(jinja::Json(add_generation_prompt));
  vars["tools"] = jinja::Value(jinja::Json(nullptr));
  vars["documents"] = jinja::Value(jinja::Json(nullptr));
  if (!impl_->bos.empty()) vars["bos_token"] = jinja::Value(jinja::Json(impl_->bos));
  if (!impl_->eos.empty()) vars["eos_token"] = jinja::Value(jinja::Json(impl_->eos));
  for (auto it = extra.begin(); it != extra.end(); ++it)
    vars[it.key()] = jinja::Value(jinja::Json(it.value()));
  try {
    return jinja::render(impl_->program, vars);
  } catch (const jinja::TemplateRaised&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(impl_->origin + "chat template " + e.what());
  }
}

}  // namespace kubetune::text
