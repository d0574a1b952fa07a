#include "common/train_config.h"

#include <gtest/gtest.h>

#include "common/source_forms.h"
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
  const TrainConfig config = parse_train_config(validate_train_config(minimal()));
  const auto& schema = train_config_schema()["properties"];
  EXPECT_EQ(nlohmann::json(config.method.type), schema["method"]["properties"]["type"]["default"]);
  EXPECT_EQ(config.training.learning_rate,
            schema["training"]["properties"]["learningRate"]["default"]);
  EXPECT_EQ(config.data.max_length, schema["data"]["properties"]["maxLength"]["default"]);
  EXPECT_EQ(checkpoint_dir(config), "out/checkpoints");
  EXPECT_FALSE(config.data.validation.has_value());  // no default: absent, not ""
  // all-linear: no list, every linear layer of whichever family
  EXPECT_TRUE(lora_target_modules(config.method.lora).empty());
}

// The generated structs' member initializers are the schema's defaults: a config built in C++
// with only the required fields is the config the validator fills in.
TEST(GeneratedTypes, MemberDefaultsAreTheSchemaDefaults) {
  TrainConfig config;
  config.model.path = "m";
  config.data.train = "t.jsonl";
  config.output.dir = "out";
  EXPECT_EQ(nlohmann::json(config), validate_train_config(minimal()));
}

// Every field of the schema survives JSON -> struct -> JSON: none is missing from the struct.
TEST(GeneratedTypes, EveryFieldRoundTrips) {
  const nlohmann::json full = validate_train_config(nlohmann::json::parse(R"({
    "model": {"path": "/m", "dtype": "bfloat16", "gradientCheckpointing": true},
    "data": {"train": "t.jsonl", "validation": "v.jsonl", "format": "prompt_completion",
             "lossOn": "all", "maxLength": 512, "packing": true, "shuffle": false},
    "method": {"type": "qlora", "lora": {"r": 8, "alpha": 16, "dropout": 0.05,
                                         "targetModules": ["q_proj", "v_proj"]},
               "quantization": {"type": "fp4", "doubleQuant": false, "blockSize": 128,
                                "computeDtype": "float16"}},
    "training": {"epochs": 3, "maxSteps": 100, "microBatchSize": 4,
                 "gradientAccumulationSteps": 2, "globalBatchSize": 0, "learningRate": 0.001,
                 "weightDecay": 0.1, "adamBeta1": 0.8, "adamBeta2": 0.99, "adamEpsilon": 1e-6,
                 "lrScheduler": "linear", "warmupSteps": 10, "warmupRatio": 0.1,
                 "maxGradNorm": 0.5, "seed": 4294967295, "logEverySteps": 5,
                 "evalEverySteps": 50},
    "output": {"dir": "/out", "saveMerged": true},
    "checkpoint": {"dir": "/ck", "everySteps": 20, "keepLast": 3, "resume": "never"},
    "distributed": {"backend": "gloo", "timeoutSeconds": 60, "bucketSizeMb": 25,
                    "sparseEmbeddingGradients": false, "sharding": "none"},
    "metrics": {"port": 9400, "jobName": "j", "lingerSeconds": 5}})"));
  const TrainConfig config = parse_train_config(full);
  EXPECT_EQ(nlohmann::json(config), full);
  EXPECT_EQ(config.training.seed, 4294967295);  // wider than int: int64_t
  EXPECT_EQ(config.method.quantization.type, api::QuantizationType::kFp4);
  EXPECT_EQ(checkpoint_dir(config), "/ck");
}

TEST(GeneratedTypes, EnumsRefuseValuesTheSchemaDoesNot) {
  api::MethodType method = api::MethodType::kFull;
  EXPECT_TRUE(parse("lora", method));
  EXPECT_EQ(method, api::MethodType::kLora);
  EXPECT_FALSE(parse("LoRA", method));
  EXPECT_THROW(nlohmann::json("prefix").get<api::MethodType>(), std::invalid_argument);
  for (api::MethodType m : api::kMethodTypeValues) {
    EXPECT_EQ(nlohmann::json(m).get<api::MethodType>(), m);
  }
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
  config["training"]["gradientAccumulationSteps"] = "8";
  EXPECT_NE(problems_of(config).find(
                "training.gradientAccumulationSteps: must be an integer (got string"),
            std::string::npos);
}

// training.microBatchSize is a number or "auto", and auto needs the global batch it splits.
TEST(TrainConfig, MicroBatchSizeIsANumberOrAuto) {
  auto config = minimal();
  config["training"]["microBatchSize"] = "8";
  EXPECT_NE(problems_of(config).find("training.microBatchSize"), std::string::npos);
  config["training"]["microBatchSize"] = 0;
  EXPECT_NE(problems_of(config).find("training.microBatchSize: must be >= 1"), std::string::npos)
      << problems_of(config);
  config["training"]["microBatchSize"] = "auto";
  EXPECT_EQ(problems_of(config), "");
  EXPECT_THROW(parse_train_config(validate_train_config(config)), ConfigError);
  config["training"]["globalBatchSize"] = 64;
  const TrainConfig parsed = parse_train_config(validate_train_config(config));
  EXPECT_TRUE(micro_batch_is_auto(parsed));
  EXPECT_THROW(micro_batch_size(parsed), std::logic_error);
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
// A near miss of a remote source (a scheme in another case, one slash or three, an empty name) is
// refused with the forms and the field named, not taken for a local folder; well-formed sources
// and local paths, a colon inside included, pass.
std::string parse_problem(const nlohmann::json& config) {
  try {
    parse_train_config(validate_train_config(config));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// output.dir: a local folder or an s3:// prefix (uploaded after the run); a near miss of one, or
// a Hub repository, is refused with the form expected. output.gguf needs a model folder.
TEST(TrainConfig, OutputsAreLocalOrS3AndGgufNeedsAModelFolder) {
  for (const std::string dir :
       {"S3://bucket/run", "s3:/bucket/run", "hf://org/name", "s3://bucket/../x"}) {
    auto config = minimal();
    config["output"]["dir"] = dir;
    const std::string problem = parse_problem(config);
    EXPECT_NE(problem.find(std::string("output.dir: ") + kRemoteOutputForms), std::string::npos)
        << dir << ": " << problem;
  }
  auto config = minimal();
  config["output"]["dir"] = "s3://bucket/runs/a";
  EXPECT_EQ(parse_problem(config), "");
  config["checkpoint"]["dir"] = "s3://bucket/runs/a/ck";
  EXPECT_EQ(parse_problem(config), "");
  config["checkpoint"]["dir"] = "s3:/bucket/ck";
  EXPECT_NE(parse_problem(config).find(std::string("checkpoint.dir: ") + kRemoteCheckpointForms),
            std::string::npos);
  config["checkpoint"].erase("dir");
  config["output"]["gguf"] = {"q8_0"};
  EXPECT_NE(parse_problem(config).find(kGgufNeedsAModelFolder), std::string::npos);
  config["output"]["saveMerged"] = true;
  EXPECT_EQ(parse_problem(config), "");
  config["output"]["gguf"] = {"q9_x"};
  EXPECT_NE(parse_problem(config).find("output.gguf"), std::string::npos) << parse_problem(config);
}

TEST(TrainConfig, NearMissSourcesAreRefusedWithTheirField) {
  for (const std::string path : {"HF://org/name", "hf:/org/name", "hf:///org/name", "hf://org/",
                                 "S3://bucket/x", "s3:/bucket/x"}) {
    auto config = minimal();
    config["model"]["path"] = path;
    const std::string problem = parse_problem(config);
    EXPECT_NE(problem.find(std::string("model.path: ") + kRemoteModelForms), std::string::npos)
        << path << ": " << problem;
    EXPECT_NE(problem.find(path), std::string::npos) << problem;
  }
  auto config = minimal();
  config["data"]["validation"] = "Hf://datasets/org/chat/valid.jsonl";
  EXPECT_NE(parse_problem(config).find(std::string("data.validation: ") + kRemoteFileForms),
            std::string::npos);
  for (const std::string path : {"hf://org/name", "hf://org/name@main", "s3://bucket/model",
                                 "/models/hf:2024/llama", "models/s3-copy"}) {
    config = minimal();
    config["model"]["path"] = path;
    EXPECT_EQ(parse_problem(config), "") << path;
  }
}

}  // namespace kubetune
