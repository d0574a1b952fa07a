// The one validator of kubetune's schemas (the trainer's config, the FineTuneJob): it does what
// the API server does to a FineTuneJob before storing it (apply defaults, check types, enums,
// required fields, ranges, lengths, patterns, list-map keys, unknown fields as with kubectl's
// strict field validation) so that the operator, `kubetune validate` and the tests agree with it
// without a cluster.
//
// CEL rules (x-kubernetes-validations) cannot be evaluated here; each rule string is looked up in
// a table of C++ equivalents (cel_rules.h). A rule without an equivalent is reported as a problem,
// so a rule added to the CRD without its C++ twin fails the tests.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kubetune {

// C++ twin of a CEL rule: returns true when `self` satisfies it. `old_self` is the stored
// object on an update (CEL's oldSelf), null on a create.
using CelEvaluator =
    std::function<bool(const nlohmann::json& self, const nlohmann::json* old_self)>;
using CelEvaluators = std::map<std::string, CelEvaluator>;  // keyed by the rule's text

// A transition rule reads oldSelf; the API server evaluates it only on updates.
inline bool is_transition_rule(const std::string& rule) {
  return rule.find("oldSelf") != std::string::npos;
}

// Applies defaults to `value` in place and appends "path: message" for every problem.
// `old_value` (the stored object, already defaulted) turns on the transition rules.
void validate_against_schema(const nlohmann::json& schema, nlohmann::json& value,
                             const std::string& path, const CelEvaluators& cel,
                             std::vector<std::string>& problems,
                             const nlohmann::json* old_value = nullptr);

}  // namespace kubetune
