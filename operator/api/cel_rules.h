// The cross-field rules of the FineTuneJob CRD, as CEL (x-kubernetes-validations, evaluated by
// the API server) and as C++ twins (evaluated by the operator, `kubetune validate` and the tests).
// Both live in one table so they cannot drift apart: the CRD generator takes the CEL text from
// here, and the validator finds the C++ twin by that same text.
#pragma once

#include <string>
#include <vector>

#include "common/schema_validator.h"

namespace kubetune::op {

struct CelRule {
  std::string where;    // schema location: "" (the object), "spec", "spec.volumes[]"
  std::string rule;     // CEL, as written into the CRD
  std::string message;  // shown to the user by the API server and by the operator
  CelEvaluator check;   // C++ equivalent of `rule`
};

const std::vector<CelRule>& cel_rules();
CelEvaluators cel_evaluators();

}  // namespace kubetune::op
