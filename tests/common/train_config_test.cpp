#include "common/train_config.h"

#include <gtest/gtest.h>

#include "common/yaml_file.h"

namespace kubetune {
namespace {

nlohmann::json minimal() {
  return nlohmann::json::parse(R"({"model": {"path": "m"}, "data": {"train": "t.jsonl"},
                                   "output": {"dir": "out"}})");
}

std::string problems_of(nlohmann::json config) {
  try {
    validate_train_config(std::move(config));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainConfig, DefaultsComeFromTheSchema) {
  auto config = TrainConfig::from_json(validate_train_config(minimal()));
  const auto& schema = train_config_schema()["properties"];
  EXPECT_EQ(config.method, schema["method"]["properties"]["type"]["default"]);
  EXPECT_EQ(config.learning_rate, schema["training"]["properties"]["learningRate"]["default"]);
  EXPECT_EQ(config.max_length, schema["data"]["properties"]["maxLength"]["default"]);
  EXPECT_EQ(config.checkpoint_dir, "out/checkpoints");
  EXPECT_EQ(config.lora.target_modules.size(), 7u);  // all-linear expands to the 7 projections
}

TEST(TrainConfig, UnknownFieldIsNamedWithItsPath) {
  auto config = minimal();
  config["training"]["learningrate"] = 1e-4;
  EXPECT_NE(problems_of(config).find("training.learningrate: unknown field (allowed: "),
            std::string::npos);
}

TEST(TrainConfig, EveryProblemIsReportedAtOnce) {
  auto config = minimal();
  config["training"]["learningRate"] = -1;
  config["method"] = {{"type", "dora"}};
  config["data"].erase("train");
  auto message = problems_of(config);
  EXPECT_NE(message.find("training.learningRate: must be > 0"), std::string::npos) << message;
  EXPECT_NE(
      message.find("method.type: must be one of [\"lora\",\"qlora\",\"full\"] (got \"dora\")"),
      std::string::npos)
      << message;
  EXPECT_NE(message.find("data.train: required field is missing"), std::string::npos) << message;
}

TEST(TrainConfig, TypesAreChecked) {
  auto config = minimal();
  config["training"]["microBatchSize"] = "8";
  EXPECT_NE(problems_of(config).find("training.microBatchSize: must be an integer (got string"),
            std::string::npos);
}

TEST(TrainConfig, YamlScalarsAreTypedLikeYaml) {
  auto j = yaml_to_json("a: 2e-4\nb: 8\nc: true\nd: \"8\"\ne: hello\nf: [1, x]\n", "inline");
  EXPECT_TRUE(j["a"].is_number_float());
  EXPECT_DOUBLE_EQ(j["a"].get<double>(), 2e-4);
  EXPECT_TRUE(j["b"].is_number_integer());
  EXPECT_EQ(j["c"], true);
  EXPECT_TRUE(j["d"].is_string());
  EXPECT_EQ(j["e"], "hello");
  EXPECT_EQ(j["f"][1], "x");
}

TEST(TrainConfig, YamlSyntaxErrorNamesTheLine) {
  try {
    yaml_to_json("a: 1\nb: [1, 2\n", "job.yaml");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("job.yaml:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kubetune
