// The template engine on its own: feature cases rendered by transformers' Jinja environment, plus
// the errors that must stop a template instead of producing a silently wrong prompt.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "tests/text/fixtures.h"
#include "text/chat_template.h"
#include "text/jinja/errors.h"

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

// ---- the sandbox (text/jinja/sandbox.h): hostile templates end in an error, never in a
// crash or a hang. Without the limits, each of these overflowed the stack or ran for hours.

std::string repeated(const std::string& piece, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += piece;
  return out;
}

// Error text of `source`, and how long compiling and rendering it took.
std::string timed_error_of(const std::string& source, double& seconds) {
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of(source);
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return message;
}

TEST(JinjaSandbox, SelfCallingMacroIsARecursionError) {
  const std::string msg = error_of("{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}");
  EXPECT_NE(msg.find("chat template line 1, column 20: template recursion deeper than 256 macro "
                     "calls (in macro 'f')"),
            std::string::npos)
      << msg;
}

TEST(JinjaSandbox, DeepLegalRecursionIsAnErrorShallowRecursionWorks) {
  const std::string countdown =
      "{% macro down(n) %}{{ n }}{% if n > 0 %},{{ down(n - 1) }}{% endif %}{% endmacro %}";
  EXPECT_EQ(render(countdown + "{{ down(3) }}"), "3,2,1,0");
  EXPECT_NO_THROW(render(countdown + "{{ down(200) }}"));
  const std::string msg = error_of(countdown + "{{ down(10000) }}");
  EXPECT_NE(msg.find("template recursion deeper than 256 macro calls"), std::string::npos) << msg;
}

TEST(JinjaSandbox, RangeIsCappedLikeJinja2) {
  const std::string msg = error_of("{% for i in range(10**6) %}{% endfor %}");
  EXPECT_NE(msg.find("line 1, column 18: Range too big. The sandbox blocks ranges larger than "
                     "MAX_RANGE (100000)."),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of("{{ range(100001) | length }}").find("Range too big"), std::string::npos);
  EXPECT_NE(error_of("{{ range(-9223372036854775807, 9223372036854775807) | length }}")
                .find("Range too big"),
            std::string::npos);
  // The length is computed, not counted: huge bounds with a large step are fine.
  EXPECT_EQ(render("{{ range(100000) | length }}"), "100000");
  EXPECT_EQ(render("{{ range(0, 10**18, 10**13) | length }}"), "100000");
  EXPECT_EQ(render("{{ range(10, 0, -3) | list }}"), "[10, 7, 4, 1]");
}

TEST(JinjaSandbox, NestedLoopsRunOutOfBudgetQuickly) {
  double seconds = 0;
  const std::string msg = timed_error_of(
      "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}", seconds);
  EXPECT_NE(msg.find("template ran more than 1000000 loop iterations and macro calls"),
            std::string::npos)
      << msg;
  EXPECT_LT(seconds, 5.0);
  // A filtered loop runs its filter for every item, even when the body never runs.
  EXPECT_NE(error_of("{% for i in range(100000) %}{% for j in range(100000) if j < 0 %}"
                     "{% endfor %}{% endfor %}")
                .find("loop iterations and macro calls"),
            std::string::npos);
  // A macro calling itself twice stays shallow but doubles its work at every level.
  EXPECT_NE(error_of("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                     "{% endmacro %}{{ f(60) }}")
                .find("loop iterations and macro calls"),
            std::string::npos);
}

// Rendering `source`, or failing with the budget error, within ten seconds: a bound against
// runaway (quadratic) work, which would take minutes, loose enough for a loaded two-core CI machine
// (these take about a second alone, and 2.25 s once under a parallel ctest).
void expect_fast(const std::string& source, const std::string& expected_or_budget) {
  const auto start = std::chrono::steady_clock::now();
  std::string result;
  try {
    result = render(source);
  } catch (const std::runtime_error& e) {
    result = e.what();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.find(expected_or_budget), std::string::npos) << source << " -> " << result;
  EXPECT_LT(seconds, 10.0) << source;
}

const char* const kBudget = "template ran more than 1000000 loop iterations and macro calls";

TEST(JinjaSandbox, MembershipTestsAreChargedPerItem) {
  const std::string big = "{% set big = range(100000) | list %}";
  // Found at once: cheap (the lookup of `big` shares it, copying nothing).
  expect_fast(big + "{% for i in range(1000) %}{{ i in big }}{% endfor %}{{ 7 in big }}",
              "TrueTrueTrue");
  // 1,000 full scans of 100,000 items: out of budget, quickly.
  expect_fast(big + "{% for i in range(1000) %}{{ -1 in big }}{% endfor %}", kBudget);
  expect_fast(big + "{% for i in range(1000) %}{{ -1 not in big }}{% endfor %}", kBudget);
  expect_fast(big + "{% for i in range(1000) %}{{ -1 is in big }}{% endfor %}", kBudget);
  expect_fast("{% set s = 'ab' * 1000000 %}{% for i in range(100000) %}{{ 'c' in s }}{% endfor %}",
              kBudget);
  expect_fast("{% set s = 'a' * 1000000 %}{{ ('a' * 500000 ~ 'b') in s }}", kBudget);
}

TEST(JinjaSandbox, UniqueAndSortAreNotQuadratic) {
  expect_fast("{{ range(100000) | unique | list | length }}", "100000");
  expect_fast("{{ (range(100000) | map('string') | list) | unique | list | length }}", "100000");
  expect_fast("{{ range(100000) | sort(reverse=true) | first }}", "99999");
  // jinja2's semantics: first occurrence kept, in order; 1 == 1.0 == True; case-insensitive.
  EXPECT_EQ(render("{{ [3, 1, 1.0, true, 3, 'A', 'a', 'b', [1], [1.0]] | unique | list }}"),
            "[3, 1, 'A', 'b', [1]]");
  EXPECT_EQ(render("{{ ['A', 'a', 'b'] | unique(case_sensitive=true) | list }}"),
            "['A', 'a', 'b']");
  EXPECT_EQ(render("{{ [{'n': 'x'}, {'n': 'X'}, {'n': 'y'}] | unique(attribute='n') | "
                   "map(attribute='n') | join(',') }}"),
            "x,y");
  EXPECT_EQ(render("{{ ['b', 'A', 'a', 'C'] | sort | join }}"), "AabC");
  // Repeating such work in a loop runs out of budget instead of running for minutes.
  expect_fast(
      "{% set big = range(100000) | list %}{% for i in range(1000) %}"
      "{{ big | unique | list | length }}{% endfor %}",
      kBudget);
  expect_fast(
      "{% set big = range(100000) | list %}{% for i in range(1000) %}"
      "{{ big | join(',') | length }}{{ big | select('odd') | list | length }}"
      "{{ big | map('string') | list | length }}{% endfor %}",
      kBudget);
}

TEST(JinjaSandbox, BigVariablesAreNotCopiedOnEveryLookup) {
  const std::string big = "{% set big = range(100000) | list %}{% set d = {'big': big} %}";
  expect_fast(big +
                  "{% set ns = namespace(n=0) %}{% for i in range(100000) %}"
                  "{% if big and d.big and big[i] == i %}{% set ns.n = ns.n + 1 %}{% endif %}"
                  "{% endfor %}{{ ns.n }}",
              "100000");
  expect_fast(big + "{% for i in range(10000) %}{{ big | length }}{% endfor %}", "100000100000");
  // Work that does copy (slices, lists built) is charged.
  expect_fast(big + "{% for i in range(100000) %}{{ big[1:] | length }}{% endfor %}", kBudget);
  expect_fast(big + "{% for i in range(100000) %}{{ [big] | length }}{% endfor %}", kBudget);
}

TEST(JinjaSandbox, DeepNestingFailsAtParseTime) {
  const int n = 100000;
  const std::string parens = error_of("{{ " + repeated("(", n) + "1" + repeated(")", n) + " }}");
  EXPECT_NE(parens.find("chat template line 1, column 259: nesting deeper than 256 levels"),
            std::string::npos)
      << parens;
  const std::string blocks =
      error_of(repeated("{% if true %}", n) + "x" + repeated("{% endif %}", n));
  EXPECT_NE(blocks.find("nesting deeper than 256 levels"), std::string::npos) << blocks;
  EXPECT_NE(error_of(repeated("{% for i in [1] %}\n", n))
                .find("line 255, column 14: nesting deeper than 256 levels"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + repeated("not ", n) + "x }}").find("nesting deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ " + repeated("-", n) + "1 }}").find("nesting deeper"), std::string::npos);
  EXPECT_NE(error_of("{{ " + repeated("[", n) + repeated("]", n) + " }}").find("nesting deeper"),
            std::string::npos);
  // Chains nest nothing in the source but make trees as deep as they are long.
  EXPECT_NE(error_of("{{ 1" + repeated(" + 1", n) + " }}")
                .find("expression nested deeper than 512 levels"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x" + repeated(" | trim", n) + " }}").find("expression nested deeper"),
            std::string::npos);
  EXPECT_NE(error_of("{{ x" + repeated(".a", n) + " }}").find("expression nested deeper"),
            std::string::npos);
  // Real templates are far from the limits.
  EXPECT_EQ(render("{{ " + repeated("(", 100) + "1" + repeated(")", 100) + " }}"), "1");
  EXPECT_EQ(render("{{ 0" + repeated(" + 1", 500) + " }}"), "500");
  // `~` chains are one flat node, as in jinja2, which takes them at any length.
  EXPECT_EQ(render("{{ ''" + repeated(" ~ 'a'", n) + " }}"), repeated("a", n));
}

TEST(JinjaSandbox, RunawayValuesAreStopped) {
  EXPECT_NE(error_of("{{ 'ab' * 10**12 }}").find("text longer than 67108864 bytes"),
            std::string::npos);
  EXPECT_NE(error_of("{{ [1, 2] * 10**12 }}").find("value with more than 1000000 items"),
            std::string::npos);
  EXPECT_EQ(render("{{ '' * 10**18 }}{{ [] * 10**18 }}"), "[]");
  // Doubling a string or a list in a short loop.
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .find("text longer than 67108864 bytes"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                     "{% set ns.s = ns.s + ns.s %}{% endfor %}")
                .find("value holding more than 67108864 bytes of text"),
            std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}"
                     "{% set ns.l = ns.l + ns.l %}{% endfor %}")
                .find("value with more than 1000000 items"),
            std::string::npos);
  // Nesting a list in itself: printing and comparing such a value would recurse past the stack.
  EXPECT_NE(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                     "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}")
                .find("value nested deeper than 256 levels"),
            std::string::npos);
  EXPECT_NE(error_of("{{ 'x' | indent(10**12) }}").find("text longer than 67108864 bytes"),
            std::string::npos);
  EXPECT_NE(
      error_of("{{ [[[1]]] | tojson(indent=10**12) }}").find("text longer than 67108864 bytes"),
      std::string::npos);
  EXPECT_NE(error_of("{{ ('x' * 10**6).replace('', 'y' * 100) }}")
                .find("text longer than 67108864 bytes"),
            std::string::npos);
  // Output as a whole: 2,000 x 64 KiB stays under every per-value limit.
  EXPECT_NE(error_of("{% set s = 'x' * 65536 %}{% for i in range(2000) %}{{ s }}{% endfor %}")
                .find("template wrote more than 67108864 bytes"),
            std::string::npos);
}

TEST(JinjaSandbox, IntegerArithmeticDoesNotWrapHangOrTrap) {
  EXPECT_NE(error_of("{{ 2 ** 1000000000000000000 }}").find("out of the 64-bit range"),
            std::string::npos);
  EXPECT_EQ(render("{{ 1 ** 1000000000000000000 }} {{ 3 ** 4 }} {{ (-2) ** 63 }}"),
            "1 81 -9223372036854775808");
  EXPECT_NE(error_of("{{ 9223372036854775807 + 1 }}").find("out of the 64-bit range"),
            std::string::npos);
  EXPECT_NE(error_of("{{ (-9223372036854775807 - 1) // -1 }}").find("out of the 64-bit range"),
            std::string::npos);
  EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_NE(
      error_of("{{ 99999999999999999999 }}").find("line 1, column 4: integer literal out of range"),
      std::string::npos);
}

TEST(JinjaSandbox, SyntaxErrorReportsLineAndColumn) {
  const std::string msg =
      error_of("{% for m in messages %}\n{{ m.role }}\n{{ m.content + }}\n{% endfor %}");
  EXPECT_NE(msg.find("chat template line 3, column 16: unexpected '}}' in expression"),
            std::string::npos)
      << msg;
}

TEST(JinjaSandbox, LongConversationStillRenders) {
  nlohmann::json messages = nlohmann::json::array();
  std::string expected;
  for (int i = 0; i < 10000; ++i) {
    const std::string role = i % 2 == 0 ? "user" : "assistant";
    const std::string content = "message " + std::to_string(i);
    messages.push_back({{"role", role}, {"content", content}});
    expected += role + ": " + content + "\n";
  }
  const auto tmpl = ChatTemplate::from_string(
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}");
  EXPECT_EQ(tmpl.render(messages, false), expected);
}

}  // namespace
}  // namespace kubetune::text
