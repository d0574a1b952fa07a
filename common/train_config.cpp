#include "common/train_config.h"

#include "common/contracts.h"
#include "common/finetunejob_schema_json.h"  // generated: kFineTuneJobSchemaJson
#include "common/preference_refusals.h"
#include "common/schema_validator.h"
#include "common/source_forms.h"
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

TrainConfig parse_train_config(const nlohmann::json& validated) {
  TrainConfig c = validated.get<TrainConfig>();
  // A near miss of a remote source ("HF://org/name", "hf:/org/name") is named here, not taken for
  // a local folder that then does not exist.
  std::vector<std::string> sources;
  if (!is_local_or_remote_source(c.model.path, true))
    sources.push_back(std::string("model.path: ") + kRemoteModelForms + " (got \"" + c.model.path +
                      "\")");
  for (const auto& [field, path] : {std::pair<std::string, std::string>{"train", c.data.train},
                                    {"validation", c.data.validation.value_or("")}})
    if (!is_local_or_remote_source(path, false))
      sources.push_back("data." + field + ": " + kRemoteFileForms + " (got \"" + path + "\")");
  if (!is_local_or_remote_output(c.output.dir))
    sources.push_back(std::string("output.dir: ") + kRemoteOutputForms + " (got \"" + c.output.dir +
                      "\")");
  if (c.checkpoint.dir && !is_local_or_remote_output(*c.checkpoint.dir))
    sources.push_back(std::string("checkpoint.dir: ") + kRemoteCheckpointForms + " (got \"" +
                      *c.checkpoint.dir + "\")");
  if (!sources.empty()) throw ConfigError(sources);
  if (!c.output.gguf.empty() && c.method.type != api::MethodType::kFull && !c.output.save_merged)
    throw ConfigError({kGgufNeedsAModelFolder});
  if (micro_batch_is_auto(c) && c.training.global_batch_size == 0)
    throw ConfigError({kAutoMicroBatchNeedsGlobalBatch});
  const bool preference = c.training.objective != api::TrainingObjective::kSft;
  const bool kto = c.training.objective == api::TrainingObjective::kKto;
  const auto format = c.data.format;
  if (preference && !kto && format != api::DataFormat::kAuto &&
      format != api::DataFormat::kPreference)
    throw ConfigError({kPreferenceObjectiveNeedsPairs});
  if ((!preference || kto) && format == api::DataFormat::kPreference)
    throw ConfigError({kPairsNeedPreferenceObjective});
  if (kto && format != api::DataFormat::kAuto && format != api::DataFormat::kUnpairedPreference)
    throw ConfigError({kKtoNeedsUnpairedExamples});
  if (!kto && format == api::DataFormat::kUnpairedPreference)
    throw ConfigError({kUnpairedExamplesNeedKto});
  if (preference && c.data.packing) throw ConfigError({kPairsAreNotPacked});
  if (c.training.preference.label_smoothing >= 0.5) throw ConfigError({kLabelSmoothingBelowHalf});
  if (c.model.precision == api::ModelPrecision::kFp8) {
    if (c.model.dtype == api::ModelDtype::kFloat32) throw ConfigError({kFp8NeedsBf16});
    if (c.distributed.sharding == api::DistributedSharding::kFull &&
        c.method.type == api::MethodType::kLora)
      throw ConfigError({kFp8LoraBaseNotSharded});
  }
  return c;
}

bool micro_batch_is_auto(const TrainConfig& c) { return c.training.micro_batch_size.is_string(); }

int64_t sequences_per_example(const TrainConfig& c) {
  // kto's step scores its KL sequences apart, without gradients: one sequence per example.
  const auto o = c.training.objective;
  return o == api::TrainingObjective::kSft || o == api::TrainingObjective::kKto ? 1 : 2;
}

int64_t micro_batch_size(const TrainConfig& c) {
  // The schema takes integral numbers written as 4.0 too.
  if (!c.training.micro_batch_size.is_number())
    throw std::logic_error("training.microBatchSize is still auto: resolve it first");
  return static_cast<int64_t>(c.training.micro_batch_size.get<double>());
}

void set_micro_batch_size(TrainConfig& c, int64_t examples) {
  c.training.micro_batch_size = examples;
}

std::vector<std::string> lora_target_modules(const api::Lora& lora) {
  for (const auto& m : lora.target_modules)
    if (m == "all-linear") return {};  // every linear layer, whatever the family names them
  return lora.target_modules;
}

std::string checkpoint_dir(const TrainConfig& c) {
  const std::string dir = c.checkpoint.dir.value_or("");
  return dir.empty() ? default_checkpoint_dir(c.output.dir) : dir;
}

TrainConfig load_train_config(const std::string& path) {
  try {
    return parse_train_config(validate_train_config(load_yaml_or_json_file(path)));
  } catch (const ConfigError& e) {
    std::vector<std::string> problems;
    for (const auto& p : e.problems()) problems.push_back(path + ": " + p);
    throw ConfigError(problems);
  }
}

}  // namespace kubetune
