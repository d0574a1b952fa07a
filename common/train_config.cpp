#include "common/train_config.h"

#include "common/contracts.h"
#include "common/finetunejob_schema_json.h"  // generated: kFineTuneJobSchemaJson
#include "common/schema_validator.h"
#include "common/yaml_file.h"

namespace kubetune {
namespace {

using nlohmann::json;

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out = "invalid training config:";
  for (const auto& line : lines) out += "\n  " + line;
  return out;
}

}  // namespace

ConfigError::ConfigError(const std::vector<std::string>& problems)
    : std::runtime_error(join_lines(problems)), problems_(problems) {}

const nlohmann::json& finetunejob_schema() {
  static const nlohmann::json schema = nlohmann::json::parse(kFineTuneJobSchemaJson);
  return schema;
}

const std::vector<std::string>& operator_spec_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> out;
    for (const auto& [name, property] : finetunejob_schema()["spec"]["properties"].items()) {
      if (property.value("x-kubetune-operator", false)) out.push_back(name);
    }
    return out;
  }();
  return fields;
}

const nlohmann::json& train_config_schema() {
  static const nlohmann::json schema = [] {
    nlohmann::json s = finetunejob_schema()["spec"];
    s["description"] = "What to train and how: the trainer's --config file.";
    for (const auto& name : operator_spec_fields()) s["properties"].erase(name);
    return s;
  }();
  return schema;
}

nlohmann::json validate_train_config(nlohmann::json config) {
  std::vector<std::string> problems;
  if (!config.is_object()) throw ConfigError({"(top level): expected an object"});
  validate_against_schema(train_config_schema(), config, "", {}, problems);
  if (!problems.empty()) throw ConfigError(problems);
  return config;
}

TrainConfig TrainConfig::from_json(const nlohmann::json& c) {
  TrainConfig t;
  t.model_path = c["model"]["path"];
  t.dtype = c["model"]["dtype"];
  t.gradient_checkpointing = c["model"]["gradientCheckpointing"];
  const auto& data = c["data"];
  t.train_file = data["train"];
  t.validation_file = data.value("validation", "");
  t.format = data["format"];
  t.loss_on = data["lossOn"];
  t.max_length = data["maxLength"];
  t.packing = data["packing"];
  t.shuffle = data["shuffle"];
  t.method = c["method"]["type"];
  const auto& lora = c["method"]["lora"];
  t.lora.r = lora["r"];
  t.lora.alpha = lora["alpha"];
  t.lora.dropout = lora["dropout"];
  for (const auto& m : lora["targetModules"]) {
    if (m == "all-linear") {
      for (const char* name :
           {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
        t.lora.target_modules.push_back(name);
    } else {
      t.lora.target_modules.push_back(m);
    }
  }
  const auto& q = c["method"]["quantization"];
  t.quantization.type = q["type"];
  t.quantization.double_quant = q["doubleQuant"];
  t.quantization.block_size = q["blockSize"];
  t.quantization.compute_dtype = q["computeDtype"];
  const auto& tr = c["training"];
  t.epochs = tr["epochs"];
  t.max_steps = tr["maxSteps"];
  t.micro_batch_size = tr["microBatchSize"];
  t.gradient_accumulation_steps = tr["gradientAccumulationSteps"];
  t.global_batch_size = tr["globalBatchSize"];
  t.learning_rate = tr["learningRate"];
  t.weight_decay = tr["weightDecay"];
  t.adam_beta1 = tr["adamBeta1"];
  t.adam_beta2 = tr["adamBeta2"];
  t.adam_epsilon = tr["adamEpsilon"];
  t.lr_scheduler = tr["lrScheduler"];
  t.warmup_steps = tr["warmupSteps"];
  t.warmup_ratio = tr["warmupRatio"];
  t.max_grad_norm = tr["maxGradNorm"];
  t.seed = tr["seed"];
  t.log_every_steps = tr["logEverySteps"];
  t.eval_every_steps = tr["evalEverySteps"];
  t.output_dir = c["output"]["dir"];
  t.save_merged = c["output"]["saveMerged"];
  const auto& ck = c["checkpoint"];
  const std::string dir = ck.value("dir", "");
  t.checkpoint_dir = dir.empty() ? default_checkpoint_dir(t.output_dir) : dir;
  t.checkpoint_every_steps = ck["everySteps"];
  t.checkpoint_keep_last = ck["keepLast"];
  t.resume = ck["resume"];
  t.dist_backend = c["distributed"]["backend"];
  t.collective_timeout_seconds = c["distributed"]["timeoutSeconds"];
  t.bucket_size_mb = c["distributed"]["bucketSizeMb"];
  t.sparse_embedding_gradients = c["distributed"]["sparseEmbeddingGradients"];
  t.shard_optimizer = c["distributed"]["shardOptimizer"];
  t.metrics_port = c["metrics"]["port"];
  t.job_name = c["metrics"]["jobName"];
  t.metrics_linger_seconds = c["metrics"]["lingerSeconds"];
  return t;
}

TrainConfig load_train_config(const std::string& path) {
  try {
    return TrainConfig::from_json(validate_train_config(load_yaml_or_json_file(path)));
  } catch (const ConfigError& e) {
    std::vector<std::string> problems;
    for (const auto& p : e.problems()) problems.push_back(path + ": " + p);
    throw ConfigError(problems);
  }
}

}  // namespace kubetune
