// Writes the FineTuneJob's C++ types from its OpenAPI schema (common/finetunejob_schema.json), as
// kubebuilder's controller-gen writes Go types: one struct per object, one enum class per string
// enum, with the schema's defaults as member initializers and nlohmann::json conversions. The build
// runs it; nobody edits its output.
//
//   generate_api_types SCHEMA OUT_HEADER OUT_SOURCE
//
// Mapping (the schema's own words, so that adding a field is one schema edit):
//   object with properties -> struct (name: x-kubetune-type, else the property's name in Pascal
//                             case); spec is split into TrainConfig (the trainer's part) and
//                             FineTuneJobSpec, which adds the x-kubetune-operator properties
//   string with enum       -> enum class (name: x-kubetune-type, else struct name + field name)
//   integer                -> int when the schema bounds it to 32 bits, else int64_t
//   number, boolean        -> double, bool
//   array, string map      -> std::vector, std::map
//   int-or-string, free    -> nlohmann::json (a quantity, a free-form object)
// A name given twice with x-kubetune-type to the same definition is one type.
// A scalar with neither a default nor `required` is std::optional: absent is not zero. Structs,
// lists and maps are always there and are left out of the JSON when empty.
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/codegen/cpp_types.h"

namespace {

// The schema's own order of properties is the order of the members.
using json = nlohmann::ordered_json;
using namespace kubetune::codegen;

class Generator {
 public:
  void run(const json& schema) {
    split_spec(schema.at("spec"));
    add_struct("FineTuneJobStatus", schema.at("status"), "status", "");
  }
  Types types() const {
    return {"common/finetunejob_schema.json by common/codegen/generate_api_types.cpp",
            "common/finetunejob_types.h", "kubetune::api", enums_, structs_};
  }

 private:
  // spec = TrainConfig (what `kubetune-trainer train --config` reads) + the operator's fields.
  void split_spec(const json& spec) {
    json trainer = spec, operator_part = spec;
    trainer["properties"] = json::object();
    operator_part["properties"] = json::object();
    for (const auto& [name, property] : spec.at("properties").items()) {
      const bool ours = property.value("x-kubetune-operator", false);
      (ours ? operator_part : trainer)["properties"][name] = property;
    }
    trainer["description"] = "What to train and how: the trainer's --config file.";
    add_struct("TrainConfig", trainer, "spec", "");
    operator_part["description"] =
        "The FineTuneJob's spec: the training config plus how the operator runs it.";
    add_struct("FineTuneJobSpec", operator_part, "spec", "TrainConfig");
  }

  void add_struct(const std::string& name, const json& node, const std::string& path,
                  const std::string& base) {
    if (!type_names_.insert(name).second) fail(path, "type name " + name + " is used twice");
    Struct s{name, base, one_line(node.value("description", "")), {}, false};
    std::set<std::string> required;
    for (const auto& r : node.value("required", json::array())) required.insert(r);
    for (const auto& [key, property] : node.at("properties").items()) {
      Field f;
      f.json_name = key;
      f.cpp_name = snake(key);
      f.comment = one_line(property.value("description", ""));
      f.required = required.count(key) > 0;
      const std::string where = path + "." + key;
      f.cpp_type = type_of(property, name, key, where);
      const bool scalar = is_scalar(property);
      f.defaulted = property.contains("default");
      if (f.defaulted) {
        f.initializer = literal(property["default"], property, f.cpp_type, where);
      } else if (scalar && !f.required) {
        f.cpp_type = "std::optional<" + f.cpp_type + ">";
      }
      s.fields.push_back(f);
    }
    structs_.push_back(s);  // after the structs of its fields: definitions come in this order
  }

  static bool is_scalar(const json& p) {
    const std::string type = p.value("type", "");
    return type == "string" || type == "integer" || type == "number" || type == "boolean";
  }

  std::string type_of(const json& p, const std::string& owner, const std::string& key,
                      const std::string& path) {
    if (p.value("x-kubernetes-int-or-string", false)) return "nlohmann::json";
    const std::string type = p.value("type", "");
    if (type == "boolean") return "bool";
    if (type == "number") return "double";
    if (type == "integer") {
      const double lo = p.value("minimum", -1e300), hi = p.value("maximum", 1e300);
      const bool fits =
          lo >= std::numeric_limits<int>::min() && hi <= std::numeric_limits<int>::max();
      return fits ? "int" : "int64_t";
    }
    if (type == "string") {
      if (!p.contains("enum") || has_empty_value(p["enum"])) return "std::string";
      const std::string name = p.value("x-kubetune-type", owner + pascal(key));
      if (same_as_before(name, p["enum"], path)) return name;
      if (!type_names_.insert(name).second) fail(path, "type name " + name + " is used twice");
      enums_.push_back({name, one_line(p.value("description", "")), p["enum"]});
      return name;
    }
    if (type == "array") {
      const json& items = p.at("items");
      if (items.value("type", "") == "object") {
        if (!items.contains("x-kubetune-type")) {
          fail(path, "a list of objects needs x-kubetune-type on its items (the struct's name)");
        }
        if (!same_as_before(items.at("x-kubetune-type"), items, path))
          add_struct(items["x-kubetune-type"], items, path + "[]", "");
        return "std::vector<" + items["x-kubetune-type"].get<std::string>() + ">";
      }
      if (!is_scalar(items)) fail(path, "lists of lists are not supported");
      // Listed strings stay strings, enum or not: they are names (modules, capabilities).
      if (items.value("type", "") == "string") return "std::vector<std::string>";
      return "std::vector<" + type_of(items, owner, key, path + "[]") + ">";
    }
    if (type == "object") {
      if (p.contains("properties")) {
        const std::string name = p.value("x-kubetune-type", pascal(key));
        if (!p.contains("x-kubetune-type") || !same_as_before(name, p, path))
          add_struct(name, p, path, "");
        return name;
      }
      if (p.contains("additionalProperties") && p["additionalProperties"].is_object() &&
          p["additionalProperties"].value("type", "") == "string") {
        return "std::map<std::string, std::string>";
      }
      if (p.value("x-kubernetes-preserve-unknown-fields", false)) return "nlohmann::json";
    }
    fail(path, "no C++ type for this schema: " + p.dump());
  }

  // A type named twice (x-kubetune-type) is one type when both places define it alike (the
  // preflight report's verdict and the status's, its train and validation data); else an error.
  bool same_as_before(const std::string& name, const json& definition, const std::string& path) {
    const auto [it, first] = definitions_.emplace(name, definition.dump());
    if (first) return false;
    if (it->second != definition.dump())
      fail(path, "type " + name + " is defined twice, differently");
    return true;
  }

  static bool has_empty_value(const json& values) {
    for (const auto& v : values) {
      if (v == "") return true;
    }
    return false;
  }

  std::string literal(const json& value, const json& p, const std::string& cpp_type,
                      const std::string& path) const {
    if (cpp_type == "nlohmann::json") return "nlohmann::json(" + value.dump() + ")";
    if (value.is_boolean() || value.is_number_integer()) return value.dump();
    if (value.is_number()) {
      std::string text = value.dump();
      if (text.find_first_of(".e") == std::string::npos) text += ".0";
      return text;
    }
    if (value.is_string()) {
      if (cpp_type == "std::string") return value.dump();
      return cpp_type + "::" + enum_constant(value);  // an enum
    }
    if (value.is_object() && value.empty()) return "";  // the struct's own defaults
    if (value.is_array()) {
      std::string out = "{";
      for (const auto& v : value) {
        out += (out.size() > 1 ? ", " : "") + literal(v, p.at("items"), "std::string", path);
      }
      return out + "}";
    }
    fail(path, "cannot write default " + value.dump() + " in C++");
  }

  std::set<std::string> type_names_;
  std::map<std::string, std::string> definitions_;  // named type -> its definition, dumped
  std::vector<Struct> structs_;
  std::vector<Enum> enums_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: generate_api_types SCHEMA OUT_HEADER OUT_SOURCE\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    Generator g;
    g.run(json::parse(in));
    write_if_changed(argv[2], write_header(g.types()));
    write_if_changed(argv[3], write_source(g.types()));
  } catch (const std::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
