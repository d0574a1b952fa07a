// Compares kubetune::text::ChatTemplate with transformers' apply_chat_template on the real
// templates of each family (reference renderings written by make_fixtures.py).
#include "text/chat_template.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>

#include "tests/text/fixtures.h"
#include "text/jinja/errors.h"

namespace kubetune::text {
namespace {

using testing::fixtures_dir;
using testing::read_fixture_json;

class ChatFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatFixture, MatchesTransformers) {
  KT_REQUIRE_FIXTURES();
  const std::string dir = fixtures_dir() + "/" + GetParam();
  const auto expected = read_fixture_json(GetParam() + "/expected.json");
  const ChatTemplate default_template = ChatTemplate::from_dir(dir);
  std::map<std::string, ChatTemplate> named;
  for (auto it = expected["templates"].begin(); it != expected["templates"].end(); ++it) {
    named.emplace(it.key(), ChatTemplate::from_string(it.value().get<std::string>()));
  }
  size_t checked = 0;
  for (const auto& c : expected["chats"]) {
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE("template " + name + ", conversation " + c["conversation"].get<std::string>() +
                 ", add_generation_prompt=" + c["add_generation_prompt"].dump() +
                 ", extra=" + c["extra"].dump());
    nlohmann::json extra = c["extra"];
    const ChatTemplate* tmpl = &default_template;
    if (name != "default") {
      tmpl = &named.at(name);
      // from_string knows no token names: pass them like transformers does.
      extra["bos_token"] = expected["bos_token"];
      extra["eos_token"] = expected["eos_token"];
    }
    const bool gen = c["add_generation_prompt"].get<bool>();
    if (c.contains("error")) {
      try {
        tmpl->render(c["messages"], gen, extra);
        ADD_FAILURE() << "expected raise_exception: " << c["error"];
      } catch (const jinja::TemplateRaised& e) {
        EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
      }
    } else {
      EXPECT_EQ(tmpl->render(c["messages"], gen, extra), c["rendered"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Families, ChatFixture,
                         ::testing::Values("llama3", "qwen2", "smollm", "mistral", "qwen3",
                                           "gemma3", "phi4", "gpt_oss"));

TEST(ChatTemplate, Llama32UsesTodaysDateWithoutDateString) {
  KT_REQUIRE_FIXTURES();
  const auto expected = read_fixture_json("llama3/expected.json");
  const auto tmpl = ChatTemplate::from_string(expected["templates"]["llama3_2"].get<std::string>());
  char today[64];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(today, sizeof(today), "%d %b %Y", &tm);
  const std::string out =
      tmpl.render(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"), true,
                  {{"bos_token", "<|begin_of_text|>"}});
  EXPECT_NE(out.find(std::string("Today Date: ") + today + "\n"), std::string::npos) << out;
}

class ChatTemplateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("kubetune_chat_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name) << content;
  }
  std::filesystem::path dir_;
};

TEST_F(ChatTemplateDir, ListFormTakesDefault) {
  write("tokenizer_config.json", R"({"bos_token": "<s>", "chat_template": [
      {"name": "tool_use", "template": "tools"},
      {"name": "default", "template": "{{ bos_token }}{{ messages[0]['content'] }}"}]})");
  const auto out = ChatTemplate::from_dir(dir_.string())
                       .render(nlohmann::json::parse(R"([{"role":"user","content":"x"}])"), false);
  EXPECT_EQ(out, "<s>x");
}

// A template that is there but unusable loads (callers take a throw to mean "no template") and
// fails when rendered, with the file and what is wrong.
TEST_F(ChatTemplateDir, ListWithoutDefaultIsAnError) {
  write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  const ChatTemplate tmpl = ChatTemplate::from_dir(dir_.string());
  try {
    tmpl.render(nlohmann::json::array(), false);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no template named \"default\" (have: rag)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ChatTemplateDir, MissingTemplateIsAClearError) {
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  try {
    ChatTemplate::from_dir(dir_.string());
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
}

TEST_F(ChatTemplateDir, SyntaxErrorNamesFileLineAndConstruct) {
  write("tokenizer_config.json",
        R"({"chat_template": "{% for m in messages %}\n{{ m | foo }}\n{% endfor %}"})");
  const ChatTemplate tmpl = ChatTemplate::from_dir(dir_.string());
  try {
    tmpl.render(nlohmann::json::array(), false);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("tokenizer_config.json: chat template line 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unsupported filter 'foo'"), std::string::npos) << msg;
  }
}

// The error a user of `kubetune-trainer train` sees for a template with a syntax error: the file,
// the line and column, and what the parser expected (it used to read "no chat template").
TEST_F(ChatTemplateDir, BrokenTemplateIsNotMistakenForAMissingOne) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": "{% for m in messages %}\n{{ m.content }}\n{% if m.role x %}{% endif %}\n{% endfor %}"})");
  const auto conversation = nlohmann::json::parse(R"([{"role":"user","content":"x"}])");
  // Callers read a throw from from_dir as "this model has no chat template".
  std::optional<ChatTemplate> tmpl;
  ASSERT_NO_THROW(tmpl.emplace(ChatTemplate::from_dir(dir_.string())));
  std::string msg;
  try {
    tmpl->render(conversation, false);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("tokenizer_config.json: chat template line 3, column 14: expected '%}', got "
                     "'x'"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find("no chat template"), std::string::npos) << msg;

  write("tokenizer_config.json", R"({"chat_template": 42})");
  try {
    ChatTemplate::from_dir(dir_.string()).render(conversation, false);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "tokenizer_config.json: field \"chat_template\": expected a string or a list"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ChatTemplateDir, JinjaFileWithSyntaxErrorNamesTheFile) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  write("chat_template.jinja", "{% for m in messages %}\n  {{ m.content | nope }}\n{% endfor %}\n");
  try {
    ChatTemplate::from_dir(dir_.string()).render(nlohmann::json::array(), false);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("chat_template.jinja: chat template line 2, column 16: "
                                         "unsupported filter 'nope'"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ChatTemplateDir, JinjaFileIsUsedWhenConfigHasNoTemplate) {
  write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  write("chat_template.jinja",
        "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}\n");
  const auto out = ChatTemplate::from_dir(dir_.string())
                       .render(nlohmann::json::parse(R"([{"role":"user","content":"a"}])"), false);
  EXPECT_EQ(out, "a</s>");
}

}  // namespace
}  // namespace kubetune::text
