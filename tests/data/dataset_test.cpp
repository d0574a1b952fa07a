// load_jsonl against references computed by transformers (make_fixtures.py), and its errors.
#include "trainer/data/dataset.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "fixtures.h"

namespace kubetune::data {
namespace {

using testing::fixture_dir;
using testing::read_fixture_json;

DatasetOptions options_of(const nlohmann::json& spec) {
  DatasetOptions options;
  options.format = spec.at("format").get<Format>();
  options.loss_on = spec.at("loss_on").get<LossOn>();
  options.max_length = spec.at("max_length").get<int>();
  return options;
}

// Loads the tokenizer folder the spec names and the dataset file with the spec's options.
std::vector<Example> load(const nlohmann::json& spec, bool with_chat = true) {
  const std::string tokenizer_dir = fixture_dir() + "/" + spec.at("tokenizer").get<std::string>();
  const auto tokenizer = text::Tokenizer::from_dir(tokenizer_dir);
  std::unique_ptr<text::ChatTemplate> chat;
  if (with_chat)
    chat = std::make_unique<text::ChatTemplate>(text::ChatTemplate::from_dir(tokenizer_dir));
  return load_jsonl(fixture_dir() + "/" + spec.at("file").get<std::string>(), tokenizer, chat.get(),
                    options_of(spec));
}

TEST(Dataset, MatchesTransformersReference) {
  const nlohmann::json cases = read_fixture_json("cases.json");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& spec : cases) {
    SCOPED_TRACE(spec.at("name").get<std::string>());
    const std::vector<Example> examples = load(spec);
    const auto& expected = spec.at("examples");
    ASSERT_EQ(examples.size(), expected.size());
    for (size_t i = 0; i < examples.size(); ++i) {
      SCOPED_TRACE("line " + std::to_string(expected[i].at("line").get<size_t>()));
      EXPECT_EQ(examples[i].source_line, expected[i].at("line").get<size_t>());
      EXPECT_EQ(examples[i].input_ids, expected[i].at("input_ids").get<std::vector<int32_t>>());
      EXPECT_EQ(examples[i].labels, expected[i].at("labels").get<std::vector<int32_t>>());
    }
  }
}

// Guards the reference itself: completion-only masking must mask something and keep something,
// otherwise the comparison above could pass with a broken masker.
TEST(Dataset, ReferenceMasksPromptTokens) {
  int checked = 0;
  for (const auto& spec : read_fixture_json("cases.json")) {
    if (spec.at("loss_on") != "completion" || spec.at("file") == "text.jsonl") continue;
    bool some_masked = false;
    for (const auto& example : spec.at("examples")) {
      const Example e{example.at("input_ids").get<std::vector<int32_t>>(),
                      example.at("labels").get<std::vector<int32_t>>(), 0};
      EXPECT_GT(count_targets(e), 0) << spec.at("name");
      some_masked |= count_targets(e) < static_cast<int64_t>(e.labels.size()) - 1;
    }
    EXPECT_TRUE(some_masked) << spec.at("name");
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

TEST(Dataset, ErrorsNameFileAndLine) {
  const nlohmann::json errors = read_fixture_json("errors.json");
  ASSERT_GE(errors.size(), 10u);
  for (const auto& spec : errors) {
    const std::string file = spec.at("file").get<std::string>();
    SCOPED_TRACE(file + " with " + spec.at("tokenizer").get<std::string>());
    try {
      load(spec, spec.at("chat").get<bool>());
      ADD_FAILURE() << "expected an error";
    } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      const std::string where = spec.at("line").is_null()
                                    ? fixture_dir() + "/" + file + ": "
                                    : fixture_dir() + "/" + file + ":" +
                                          std::to_string(spec.at("line").get<int>()) + ": ";
      EXPECT_EQ(message.rfind(where, 0), 0u) << message;
      for (const auto& part : spec.at("contains")) {
        EXPECT_NE(message.find(part.get<std::string>()), std::string::npos)
            << "missing \"" << part.get<std::string>() << "\" in: " << message;
      }
    }
  }
}

TEST(Dataset, CountTargetsSkipsPositionZero) {
  EXPECT_EQ(count_targets(Example{{1, 2, 3, 4}, {1, kIgnoreIndex, 3, 4}, 1}), 2);
  EXPECT_EQ(count_targets(Example{{1}, {1}, 1}), 0);
  EXPECT_EQ(count_targets(Example{}), 0);
}

}  // namespace
}  // namespace kubetune::data
