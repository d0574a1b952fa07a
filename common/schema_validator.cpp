#include "common/schema_validator.h"

#include <regex>
#include <set>

namespace kubetune {
namespace {

using nlohmann::json;

std::string child_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

std::string type_name(const json& v) {
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number_float()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "null";
}

// A float with an integral value (1.0) is accepted where an integer is wanted, as YAML readers
// and JSON encoders disagree on how to spell whole numbers.
bool matches_type(const std::string& want, const json& v) {
  if (want == "number") return v.is_number();
  if (want == "integer") {
    return v.is_number_integer() || v.is_number_unsigned() ||
           (v.is_number_float() && v.get<double>() == static_cast<double>(v.get<long long>()));
  }
  return type_name(v) == want;
}

std::string short_dump(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

struct Checker {
  const CelEvaluators& cel;
  std::vector<std::string>& problems;

  void fail(const std::string& path, const std::string& message) {
    problems.push_back((path.empty() ? std::string("<root>") : path) + ": " + message);
  }

  void check_number(const json& s, const json& v, const std::string& path) {
    const double x = v.get<double>();
    if (s.contains("minimum")) {
      const double m = s["minimum"].get<double>();
      const bool exclusive = s.value("exclusiveMinimum", false);
      if (exclusive ? !(x > m) : !(x >= m)) {
        fail(path, "must be " + std::string(exclusive ? "> " : ">= ") + s["minimum"].dump() +
                       " (got " + v.dump() + ")");
      }
    }
    if (s.contains("maximum")) {
      const double m = s["maximum"].get<double>();
      const bool exclusive = s.value("exclusiveMaximum", false);
      if (exclusive ? !(x < m) : !(x <= m)) {
        fail(path, "must be " + std::string(exclusive ? "< " : "<= ") + s["maximum"].dump() +
                       " (got " + v.dump() + ")");
      }
    }
  }

  void check_string(const json& s, const json& v, const std::string& path) {
    const auto& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && str.size() < s["minLength"].get<size_t>()) {
      fail(path, str.empty() ? "must not be empty"
                             : "must be at least " + s["minLength"].dump() + " characters");
    }
    if (s.contains("maxLength") && str.size() > s["maxLength"].get<size_t>()) {
      fail(path, "must be at most " + s["maxLength"].dump() + " characters");
    }
    if (s.contains("pattern")) {
      const std::regex re(s["pattern"].get<std::string>(), std::regex::ECMAScript);
      if (!std::regex_search(str, re)) {
        fail(path, "\"" + str + "\" does not match the pattern " + s["pattern"].get<std::string>());
      }
    }
  }

  void check_object(const json& s, json& v, const json* old, const std::string& path) {
    const json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<size_t>()) {
      fail(path, "must have at most " + s["maxProperties"].dump() + " properties");
    }
    if (props) {
      // Defaults first (the API server defaults before it validates).
      for (auto it = props->begin(); it != props->end(); ++it) {
        if (!v.contains(it.key()) && it.value().contains("default")) {
          v[it.key()] = it.value()["default"];
        }
      }
    }
    for (const auto& req : s.value("required", json::array())) {
      if (!v.contains(req.get<std::string>())) {
        fail(child_path(path, req.get<std::string>()), "required field is missing");
      }
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string p = child_path(path, it.key());
      if (props && props->contains(it.key())) {
        const json* old_child =
            old && old->is_object() && old->contains(it.key()) ? &old->at(it.key()) : nullptr;
        check(props->at(it.key()), it.value(), old_child, p);
      } else if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
        check(s["additionalProperties"], it.value(), nullptr, p);
      } else if (props && !s.value("x-kubernetes-preserve-unknown-fields", false)) {
        std::string allowed;
        for (auto k = props->begin(); k != props->end(); ++k) {
          allowed += (allowed.empty() ? "" : ", ") + k.key();
        }
        fail(p, "unknown field (allowed: " + allowed + ")");
      }
    }
  }

  void check_array(const json& s, json& v, const std::string& path) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) {
      fail(path, "must have at least " + s["minItems"].dump() + " items");
    }
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) {
      fail(path, "must have at most " + s["maxItems"].dump() + " items");
    }
    if (s.contains("items")) {
      for (size_t i = 0; i < v.size(); ++i) {
        check(s["items"], v[i], nullptr, path + "[" + std::to_string(i) + "]");
      }
    }
    if (s.value("x-kubernetes-list-type", "") == "map") {
      std::set<std::string> seen;
      for (size_t i = 0; i < v.size(); ++i) {
        json key = json::array();
        for (const auto& k : s["x-kubernetes-list-map-keys"]) key.push_back(v[i].value(k, json()));
        if (!seen.insert(key.dump()).second) {
          fail(path + "[" + std::to_string(i) + "]", "duplicate entry with key " + key.dump());
        }
      }
    }
  }

  // As the API server: a rule that reads oldSelf is a transition rule, checked only on updates.
  void check_cel(const json& s, const json& v, const json* old, const std::string& path) {
    for (const auto& rule : s.value("x-kubernetes-validations", json::array())) {
      const std::string text = rule.value("rule", "");
      auto it = cel.find(text);
      if (it == cel.end()) {
        fail(path, "no C++ evaluator for CEL rule: " + text);
      } else if (is_transition_rule(text) && old == nullptr) {
        continue;
      } else if (!it->second(v, old)) {
        fail(path, rule.value("message", "failed rule: " + text));
      }
    }
  }

  void check(const json& s, json& v, const json* old, const std::string& path) {
    if (s.value("x-kubernetes-int-or-string", false)) {
      if (!v.is_string() && !matches_type("integer", v)) {
        fail(path, "must be an integer or a string (got " + type_name(v) + ")");
        return;
      }
      if (v.is_string()) check_string(s, v, path);
      if (v.is_number()) check_number(s, v, path);
      check_cel(s, v, old, path);
      return;
    }
    if (v.is_null() && s.value("nullable", false)) return;
    const std::string want = s.value("type", "");
    if (!want.empty() && !matches_type(want, v)) {
      const std::string article =
          std::string("aeiou").find(want[0]) != std::string::npos ? "an " : "a ";
      fail(path, "must be " + article + want + " (got " + type_name(v) + " " + short_dump(v) + ")");
      return;
    }
    if (s.contains("enum")) {
      bool ok = false;
      for (const auto& e : s["enum"]) ok = ok || e == v;
      if (!ok) fail(path, "must be one of " + s["enum"].dump() + " (got " + v.dump() + ")");
    }
    if (v.is_number()) check_number(s, v, path);
    if (v.is_string()) check_string(s, v, path);
    if (v.is_object()) check_object(s, v, old, path);
    if (v.is_array()) check_array(s, v, path);
    check_cel(s, v, old, path);
  }
};

}  // namespace

void validate_against_schema(const json& schema, json& value, const std::string& path,
                             const CelEvaluators& cel, std::vector<std::string>& problems,
                             const json* old_value) {
  Checker{cel, problems}.check(schema, value, old_value, path);
}

}  // namespace kubetune
