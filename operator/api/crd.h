// The FineTuneJob CustomResourceDefinition, made from the one FineTuneJob schema
// (common/finetunejob_schema.json: spec and status) and the CEL rules (cel_rules.h). The checked-in
// charts/kubetune/crds/finetunejobs.yaml is `kubetune-operator crd`; a test keeps them equal.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::op {

// The schema of status (structural, as in the CRD).
const nlohmann::json& status_schema();

// openAPIV3Schema of a whole FineTuneJob object (apiVersion, kind, metadata, spec, status).
const nlohmann::json& job_schema();

// The CRD object (render/yaml_emit.h writes it as YAML).
nlohmann::json crd();

// Turns our JSON schema into a structural CRD schema: `additionalProperties: false` is not allowed
// there (unknown fields are pruned or, with strict field validation, rejected), nor are our own
// x-kubetune-* markers.
nlohmann::json to_structural(nlohmann::json schema);

}  // namespace kubetune::op
