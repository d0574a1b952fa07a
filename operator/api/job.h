// A FineTuneJob read from the API server (or a manifest file), defaulted and validated with the
// same rules as the CRD, and split into the trainer's config and the operator's settings.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/train_config.h"

namespace kubetune::op {

// Every problem of a manifest, one per line, each starting with the field's path.
class SpecError : public std::runtime_error {
 public:
  explicit SpecError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// The spec's types (api::FineTuneJobSpec, api::Workers, api::RunPolicy, api::Volume) are generated
// from the schema (common/codegen), with the schema's defaults.
using api::FineTuneJobSpec;
using api::RunPolicy;
using api::Volume;
using api::Workers;

struct FineTuneJob {
  std::string name;
  std::string ns;
  std::string uid;
  long generation = 0;
  nlohmann::json spec_json;     // the spec, defaulted: what the spec hash is taken of
  nlohmann::json train_config;  // the trainer's part of it (its config.json), metrics.jobName set
  FineTuneJobSpec spec;         // the same, typed
  // The revisions the preflight's fetch resolved the hf:// and s3:// sources to
  // (status.sources): the workers' fetch is pinned to them. Empty before the preflight.
  std::vector<api::FetchedSource> fetched_sources;
};

// Defaults and validates a whole FineTuneJob object; throws SpecError listing every problem.
FineTuneJob parse_job(const nlohmann::json& object);

// The same checks without parsing: an empty list means valid. `object` gets its defaults.
std::vector<std::string> validate_job(nlohmann::json& object);

// A FineTuneJob's status (api::FineTuneJobStatus, generated from the CRD's schema). FineTuneJob is
// our own kind, not one of operator/kube/kube_types.h: its object stays JSON as the informer and
// the REST client carry it, and these are the only readers and writers of its status member.
//
// The status the object stores ({} while it has none); throws when it does not fit the schema.
api::FineTuneJobStatus job_status(const nlohmann::json& object);
// The same, except that a status written by an operator from before the preflight report was
// typed (any object in status.preflight.report) is read without that report, keeping the rest.
api::FineTuneJobStatus upgraded_job_status(const nlohmann::json& object);
// Replaces the object's status: what the status subresource's update takes.
void set_job_status(nlohmann::json& object, const api::FineTuneJobStatus& status);

}  // namespace kubetune::op
