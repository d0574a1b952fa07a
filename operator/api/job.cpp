#include "operator/api/job.h"

#include <regex>

#include "common/contracts.h"
#include "common/schema_validator.h"
#include "common/train_config.h"
#include "operator/api/cel_rules.h"
#include "operator/api/crd.h"
#include "operator/kube/objects.h"

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

// Why the metadata does not read as Kubernetes' ObjectMeta (a label value that is a number), or
// "". parse_job reads it so, as the API server decodes it (which refuses such a manifest too).
std::string metadata_problem(const json& object) {
  try {
    kube::metadata_of(object);
    return "";
  } catch (const json::exception& e) {
    return std::string("does not read as an ObjectMeta: ") + e.what();
  }
}

// The status member of a FineTuneJob object, as stored: {} while it has none.
json stored_status(const json& object) { return object.value("status", json::object()); }

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
  } else if (const std::string why = metadata_problem(object); !why.empty()) {
    problems.push_back("metadata: " + why);
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
  const k8s::ObjectMeta meta = kube::metadata_of(obj);
  job.name = kube::name_of(meta);
  job.ns = meta.namespace_.value_or("default");
  job.uid = kube::uid_of(meta);
  job.generation = meta.generation.value_or(0);
  job.spec_json = obj["spec"];
  job.train_config = validate_train_config(training_part(job.spec_json));
  job.spec = job.spec_json.get<FineTuneJobSpec>();
  // The `job` label of every series: the job's name unless the spec names one. The trainer reads
  // it from its config.json, which is JSON as it is written.
  if (job.spec.metrics.job_name.empty()) job.spec.metrics.job_name = job.name;
  job.train_config["metrics"]["jobName"] = job.spec.metrics.job_name;
  return job;
}

api::FineTuneJobStatus job_status(const json& object) {
  return stored_status(object).get<api::FineTuneJobStatus>();
}

api::FineTuneJobStatus upgraded_job_status(const json& object) {
  json status = stored_status(object);
  try {
    return status.get<api::FineTuneJobStatus>();
  } catch (const std::exception&) {
    // An operator before the typed preflight report stored any object there; drop it, keep the
    // rest.
    const auto preflight = status.find("preflight");
    if (preflight != status.end() && preflight->is_object()) preflight->erase("report");
    return status.get<api::FineTuneJobStatus>();
  }
}

void set_job_status(json& object, const api::FineTuneJobStatus& status) {
  object["status"] = status;
}

}  // namespace kubetune::op
