// metav1.Condition bookkeeping, as apimachinery's meta.SetStatusCondition: lastTransitionTime
// changes only when status flips, so "since when" stays true across repeated reconciles. The
// condition types are the schema's (api::ConditionType); the reasons are policy/reasons.h's.
#pragma once

#include <string>
#include <vector>

#include "common/finetunejob_types.h"
#include "operator/policy/reasons.h"
#include "operator/policy/time_util.h"

namespace kubetune::op {

using api::Condition;
using api::ConditionType;

// Sets (adds or updates) the condition of that type.
void set_condition(std::vector<Condition>& conditions, ConditionType type, bool value,
                   Reason reason, const std::string& message, long generation, SystemTime now);

// The condition of that type, or null.
const Condition* find_condition(const std::vector<Condition>& conditions, ConditionType type);
bool condition_is_true(const std::vector<Condition>& conditions, ConditionType type);

}  // namespace kubetune::op
