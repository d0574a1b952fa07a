// Hostile YAML and JSON: each case is one that used to hang, crash or silently pick a value.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "common/strict_json.h"
#include "common/yaml_file.h"

namespace kubetune {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(YamlFile, BillionLaughsIsRefusedQuickly) {
  // Ten levels of ten aliases: 10^10 nodes once expanded.
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 10; ++i) {
    const std::string p = "*a" + std::to_string(i - 1);
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + p;
    for (int k = 0; k < 9; ++k) text += ", " + p;
    text += "]\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string e = error_of([&] { yaml_to_json(text, "laughs.yaml"); });
  EXPECT_NE(e.find("laughs.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("more than 1000000 nodes"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(YamlFile, ModestAliasesStillWork) {
  auto j = yaml_to_json("base: &b {r: 16}\none: *b\ntwo: *b\n", "ok.yaml");
  EXPECT_EQ(j["two"]["r"], 16);
}

TEST(YamlFile, DuplicateKeyNamesItsLine) {
  const std::string e =
      error_of([] { yaml_to_json("training:\n  epochs: 1\n  epochs: 3\n", "c.yaml"); });
  EXPECT_NE(e.find("c.yaml:3:"), std::string::npos) << e;
  EXPECT_NE(e.find("duplicate key \"epochs\""), std::string::npos) << e;
}

TEST(YamlFile, SecondDocumentIsRefused) {
  const std::string e = error_of([] { yaml_to_json("a: 1\n---\nb: 2\n", "two.yaml"); });
  EXPECT_NE(e.find("two.yaml:"), std::string::npos) << e;
  EXPECT_NE(e.find("second YAML document"), std::string::npos) << e;
  EXPECT_EQ(yaml_to_json("---\na: 1\n", "one.yaml")["a"], 1);  // a leading --- is one document
}

TEST(YamlFile, AnchorContainingItselfIsAnErrorNotACrash) {
  for (const char* text : {"x: &a [*a]\n", "x: &a {b: *a}\n"}) {
    const std::string e = error_of([&] { yaml_to_json(text, "loop.yaml"); });
    EXPECT_NE(e.find("nested deeper than 128 levels"), std::string::npos) << e;
  }
}

TEST(YamlFile, TrailingDocumentSeparatorIsNotASecondDocument) {
  EXPECT_EQ(yaml_to_json("a: 1\n---\n", "x.yaml")["a"], 1);
  EXPECT_EQ(yaml_to_json("---\na: 1\n---\n---\n", "x.yaml")["a"], 1);
}

TEST(YamlFile, InvalidUtf8NamesItsLine) {
  const std::string e = error_of([] { yaml_to_json("a: 1\nb: \"x\xb0y\"\n", "bytes.yaml"); });
  EXPECT_NE(e.find("bytes.yaml:2: not UTF-8 (byte 0xB0"), std::string::npos) << e;
}

// yaml-cpp's LoadAll loops forever, allocating, on this; it must be an error in a moment.
TEST(YamlFile, StrayTextAfterAFlowDocumentIsAnError) {
  const std::string e = error_of(
      [] { yaml_to_json("{\n \"m\": {\"q\": 1},\n \"t\": 2\n },\n \"x\": 1\n}\n", "stray.yaml"); });
  EXPECT_NE(e.find("stray.yaml:"), std::string::npos) << e;
}

TEST(YamlFile, DeepNestingIsAnErrorNotACrash) {
  const std::string e = error_of([] { yaml_to_json(std::string(100000, '[') + "1", "deep.yaml"); });
  EXPECT_NE(e.find("deep.yaml:"), std::string::npos) << e;
}

TEST(StrictJson, DuplicateKeyNamesItsPath) {
  const std::string e =
      error_of([] { parse_json_strict(R"({"a": {"b": 1, "b": 2}})", "config.json"); });
  EXPECT_NE(e.find("config.json: duplicate key at /\"a\"/\"b\""), std::string::npos) << e;
  // The same key in two objects is not a duplicate.
  EXPECT_EQ(parse_json_strict(R"([{"b": 1}, {"b": 2}])", "x")[1]["b"], 2);
}

TEST(StrictJson, DeepNestingIsRefused) {
  const std::string deep = std::string(50000, '[') + std::string(50000, ']');
  const std::string e = error_of([&] { parse_json_strict(deep, "tokenizer.json"); });
  EXPECT_NE(e.find("tokenizer.json: nested deeper than 128 levels"), std::string::npos) << e;
  const std::string ok = std::string(100, '[') + std::string(100, ']');
  EXPECT_NO_THROW(parse_json_strict(ok, "x"));
}

TEST(StrictJson, SyntaxErrorHasPositionWithoutLibraryTag) {
  const std::string e = error_of([] { parse_json_strict("{\"a\": 1,,}", "state.json"); });
  EXPECT_EQ(e.rfind("state.json: invalid JSON: parse error at line 1, column 9", 0), 0u) << e;
}

}  // namespace
}  // namespace kubetune
