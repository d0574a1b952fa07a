// The template engine on its own: feature cases rendered by transformers' Jinja environment, plus
// the errors that must stop a template instead of producing a silently wrong prompt.
#include <gtest/gtest.h>

#include "tests/text/fixtures.h"
#include "trainer/text/chat_template.h"
#include "trainer/text/jinja/errors.h"

namespace kubetune::text {
namespace {

using testing::read_fixture_json;

std::string render(const std::string& source,
                   const nlohmann::json& vars = nlohmann::json::object()) {
  return ChatTemplate::from_string(source).render(nlohmann::json::array(), false, vars);
}

// Message of the std::runtime_error thrown while compiling+rendering `source`.
std::string error_of(const std::string& source,
                     const nlohmann::json& vars = nlohmann::json::object()) {
  try {
    render(source, vars);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for template: " << source;
  return "";
}

TEST(Jinja, FeatureCasesMatchTransformers) {
  KT_REQUIRE_FIXTURES();
  const auto cases = read_fixture_json("jinja_cases.json");
  ASSERT_GT(cases.size(), 20u);
  for (const auto& c : cases) {
    SCOPED_TRACE("case " + c["name"].get<std::string>());
    const std::string source = c["template"].get<std::string>();
    if (c.contains("error")) {
      try {
        render(source, c["vars"]);
        ADD_FAILURE() << "expected an error: " << c["error"];
      } catch (const jinja::TemplateRaised& e) {
        EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
      }
      continue;
    }
    try {
      EXPECT_EQ(render(source, c["vars"]), c["rendered"].get<std::string>());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

TEST(Jinja, UnsupportedConstructsFailAtLoadWithLocation) {
  EXPECT_NE(error_of("a\nb {{ x | foo }}")
                .find("chat template line 2, column 8: unsupported filter 'foo'"),
            std::string::npos)
      << error_of("a\nb {{ x | foo }}");
  EXPECT_NE(error_of("{% include 'x.j2' %}").find("line 1, column 4: unsupported tag 'include'"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x.append(1) }}").find("unsupported method 'append'"), std::string::npos);
  EXPECT_NE(error_of("{{ lipsum() }}").find("unsupported function 'lipsum'"), std::string::npos);
  EXPECT_NE(error_of("{% if x is prime %}{% endif %}").find("unsupported test 'prime'"),
            std::string::npos);
  EXPECT_NE(error_of("{% for x in xs recursive %}{% endfor %}").find("recursive"),
            std::string::npos);
  // Unsupported pieces inside branches that would not run still fail: nothing is silently skipped.
  EXPECT_NE(error_of("{% if false %}{{ x | nope }}{% endif %}").find("unsupported filter 'nope'"),
            std::string::npos);
}

TEST(Jinja, SyntaxErrorsNameTheProblem) {
  EXPECT_NE(error_of("{% if x %}never closed").find("expected 'endif'"), std::string::npos)
      << error_of("{% if x %}never closed");
  EXPECT_NE(error_of("{{ x ").find("unterminated"), std::string::npos);
  EXPECT_NE(error_of("{% endfor %}").find("unexpected 'endfor'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'abc }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{# comment").find("unterminated comment"), std::string::npos);
}

TEST(Jinja, RuntimeErrorsCarryLocation) {
  const std::string msg = error_of("line one\n{{ messages[0]['role'] }}");
  EXPECT_NE(msg.find("chat template line 2"), std::string::npos) << msg;
  EXPECT_NE(error_of("{{ 1 + 'a' }}").find("unsupported operand types for +"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("only namespace() objects"),
            std::string::npos);
}

TEST(Jinja, RaiseExceptionCarriesExactMessage) {
  try {
    render("{{ raise_exception('Only user and assistant roles are supported!') }}");
    FAIL() << "expected TemplateRaised";
  } catch (const jinja::TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "Only user and assistant roles are supported!");
  }
}

TEST(Jinja, VariablesAndDefaults) {
  // transformers passes tools/documents as None, so `tools is defined` holds and `tools` is falsy.
  EXPECT_EQ(render("{{ tools is defined }}{{ tools is none }}{{ documents is none }}"),
            "TrueTrueTrue");
  EXPECT_EQ(render("{{ add_generation_prompt }}"), "False");
  EXPECT_EQ(render("{{ bos_token is defined }}"), "False");
  EXPECT_EQ(render("{{ tools | length }}", {{"tools", {1, 2}}}), "2");
  EXPECT_EQ(render("{{ strftime_now is defined }}|{{ raise_exception is defined }}"), "True|True");
}

}  // namespace
}  // namespace kubetune::text
