#include "operator/policy/conditions.h"

namespace kubetune::op {

using api::ConditionStatus;

void set_condition(std::vector<Condition>& conditions, ConditionType type, bool value,
                   Reason reason, const std::string& message, long generation, SystemTime now) {
  const ConditionStatus status = value ? ConditionStatus::kTrue : ConditionStatus::kFalse;
  Condition* c = nullptr;
  for (auto& existing : conditions) {
    if (existing.type == type) c = &existing;
  }
  if (!c) {
    c = &conditions.emplace_back();
    c->type = type;
    c->status = ConditionStatus::kUnknown;
  }
  if (c->status != status) c->last_transition_time = format_time(now);
  c->status = status;
  c->reason = to_string(reason);
  c->message = message;
  c->observed_generation = generation;
}

const Condition* find_condition(const std::vector<Condition>& conditions, ConditionType type) {
  for (const auto& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool condition_is_true(const std::vector<Condition>& conditions, ConditionType type) {
  const Condition* c = find_condition(conditions, type);
  return c && c->status == api::ConditionStatus::kTrue;
}

}  // namespace kubetune::op
