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
};

// Defaults and validates a whole FineTuneJob object; throws SpecError listing every problem.
FineTuneJob parse_job(const nlohmann::json& object);

// The same checks without parsing: an empty list means valid. `object` gets its defaults.
std::vector<std::string> validate_job(nlohmann::json& object);

}  // namespace kubetune::op
