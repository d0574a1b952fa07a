#include "operator/api/job.h"

#include <regex>

#include "common/contracts.h"
#include "common/schema_validator.h"
#include "common/train_config.h"
#include "operator/api/cel_rules.h"
#include "operator/api/crd.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

// A namespace name, as Kubernetes checks it (IsDNS1123Label).
bool is_dns1123_label(const json& value) {
  static const std::regex label("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  if (!value.is_string()) return false;
  const std::string& s = value.get_ref<const std::string&>();
  return !s.empty() && s.size() <= 63 && std::regex_match(s, label);
}

// The trainer's part of the spec: everything but the operator's keys.
json training_part(const json& spec) {
  json out = spec;
  for (const auto& key : operator_spec_fields()) out.erase(key);
  return out;
}

}  // namespace

SpecError::SpecError(std::vector<std::string> problems)
    : std::runtime_error("invalid FineTuneJob:\n" + join_lines(problems)),
      problems_(std::move(problems)) {}

std::vector<std::string> validate_job(json& object) {
  std::vector<std::string> problems;
  if (!object.is_object()) return {"<root>: a FineTuneJob must be a mapping"};
  // Required, as the API server requires them: without them kubectl cannot route the manifest.
  if (object.value("apiVersion", json()) != kApiVersion) {
    problems.push_back("apiVersion: must be " + std::string(kApiVersion));
  }
  if (object.value("kind", json()) != kKind) {
    problems.push_back("kind: must be " + std::string(kKind));
  }
  const json meta = object.value("metadata", json::object());
  if (!meta.is_object()) return {"metadata: must be a mapping"};
  if (meta.value("name", "").empty() && meta.value("generateName", "").empty()) {
    problems.push_back("metadata.name: required field is missing");
  }
  if (meta.contains("namespace") && !is_dns1123_label(meta["namespace"])) {
    problems.push_back(
        "metadata.namespace: must be a DNS-1123 label (lower-case letters, digits "
        "and '-', at most 63 characters), got " +
        meta["namespace"].dump());
  }
  json status = object.contains("status") ? object["status"] : json();
  object.erase("status");  // written by the operator, never a user's problem
  validate_against_schema(job_schema(), object, "", cel_evaluators(), problems);
  if (!status.is_null()) object["status"] = status;
  if (!problems.empty() || !object.contains("spec")) return problems;
  // The trainer's own validator has the last word on its part (cross-field checks the schema
  // cannot express); its paths are relative to the config, ours to the object.
  try {
    validate_train_config(training_part(object["spec"]));
  } catch (const ConfigError& e) {
    for (const auto& p : e.problems()) problems.push_back("spec." + p);
  }
  return problems;
}

FineTuneJob parse_job(const json& object) {
  json obj = object;
  auto problems = validate_job(obj);
  if (!problems.empty()) throw SpecError(problems);
  FineTuneJob job;
  const json& meta = obj["metadata"];
  job.name = meta.value("name", "");
  job.ns = meta.value("namespace", "default");
  job.uid = meta.value("uid", "");
  job.generation = meta.value("generation", 0L);
  job.spec_json = obj["spec"];
  job.train_config = validate_train_config(training_part(job.spec_json));
  if (job.train_config["metrics"].value("jobName", "").empty()) {
    job.train_config["metrics"]["jobName"] = job.name;  // the `job` label of every series
  }
  job.spec = job.spec_json.get<FineTuneJobSpec>();
  job.spec.metrics.job_name = job.train_config["metrics"]["jobName"];
  return job;
}

}  // namespace kubetune::op
