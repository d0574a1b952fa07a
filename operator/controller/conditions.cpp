#include "operator/controller/conditions.h"

namespace kubetune::op {

using nlohmann::json;

void set_condition(json& status, const std::string& type, bool value, const std::string& reason,
                   const std::string& message, long generation, SystemTime now) {
  if (!status.contains("conditions") || !status["conditions"].is_array()) {
    status["conditions"] = json::array();
  }
  const std::string s = value ? "True" : "False";
  for (auto& c : status["conditions"]) {
    if (c.value("type", "") != type) continue;
    if (c.value("status", "") != s) c["lastTransitionTime"] = format_time(now);
    c["status"] = s;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = generation;
    return;
  }
  status["conditions"].push_back({{"type", type},
                                  {"status", s},
                                  {"reason", reason},
                                  {"message", message},
                                  {"observedGeneration", generation},
                                  {"lastTransitionTime", format_time(now)}});
}

json find_condition(const json& status, const std::string& type) {
  if (!status.is_object()) return nullptr;
  for (const auto& c : status.value("conditions", json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

bool condition_is_true(const json& status, const std::string& type) {
  const json c = find_condition(status, type);
  return !c.is_null() && c.value("status", "") == "True";
}

}  // namespace kubetune::op
