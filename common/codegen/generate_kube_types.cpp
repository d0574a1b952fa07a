// Writes C++ types for the Kubernetes objects the operator reads and writes, from the OpenAPI v3
// documents the API server publishes (pinned in operator/kube/openapi/), as client-go's types are
// generated from Go. Only the kinds and fields listed in operator/kube/kube_types.json are
// written; every other member of an object is kept as it was read (Struct::keeps_unknown_fields),
// so a status or spec written back loses nothing another controller put there.
//
//   generate_kube_types LIST OUT_HEADER OUT_SOURCE
//
// LIST names the documents (paths relative to LIST) and, for each C++ type, the schema it comes
// from and the fields it has:
//   "Pod": {"schema": "io.k8s.api.core.v1.Pod", "fields": ["metadata", "spec", "status"]}
// A schema is a component of a document, or an object inside one by its path of properties
// ("io.x-k8s.kueue.v1beta2.Workload/spec": a CRD's schemas are not split into components).
// A field whose value is an object names the listed type of that object's schema; "field_types"
// names it instead where two schemas describe one object (Kueue's inline pod template is a
// PodTemplateSpec). Components listed under "scalars" are one C++ type (a Time is a string, a
// Quantity a string or number). "present" names the objects a CRD's schema does not default that
// are still always there to read (its metadata; spec and status, read empty when absent).
//
// Mapping: string -> std::string (Kubernetes enums grow between versions, so they stay strings);
// integer -> int (int32) or int64_t; number, boolean -> double, bool; array -> std::vector; map ->
// std::map<std::string, T>; int-or-string and schemaless objects -> nlohmann::json. A scalar the
// schema does not require is std::optional, defaulted or not (a Kubernetes default is the
// server's to apply: absent stays absent when written), and so is an object it neither requires
// nor defaults, as it is a pointer in Go (a container state that is not `terminated`).
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/codegen/cpp_types.h"

namespace {

using json = nlohmann::ordered_json;
using namespace kubetune::codegen;

class KubeTypes {
 public:
  KubeTypes(const json& list, const std::string& list_dir) : list_(list) {
    for (const auto& file : list.at("documents")) {
      std::ifstream in(list_dir + "/" + file.get<std::string>());
      if (!in) fail(file, "cannot read this document");
      documents_.push_back(json::parse(in).at("components").at("schemas"));
    }
    // A schema listed twice (PartialObjectMetadata reads ConfigMap's) is no field's type: a field
    // whose schema it is must name its type with field_types.
    for (const auto& [name, type] : list.at("types").items()) {
      const auto [it, first] = by_schema_.emplace(type.at("schema"), name);
      if (!first) it->second = "";
    }
  }

  Types run() {
    for (const auto& [name, type] : list_.at("types").items()) define(name);
    return {
        "the OpenAPI documents in operator/kube/openapi/ and operator/kube/kube_types.json by "
        "common/codegen/generate_kube_types.cpp",
        "operator/kube/kube_types.h",
        "kubetune::k8s",
        {},
        structs_};
  }

 private:
  // The schema at "component/property/property..." (an array's items and a map's values are
  // stepped through: "Workload/spec/podSets" is the schema of one pod set).
  json schema_at(const std::string& path) const {
    const auto slash = path.find('/');
    json node = component(path.substr(0, slash), path);
    std::string rest = slash == std::string::npos ? "" : path.substr(slash + 1);
    while (!rest.empty()) {
      const auto next = rest.find('/');
      const std::string key = rest.substr(0, next);
      rest = next == std::string::npos ? "" : rest.substr(next + 1);
      node = element(node).at("properties").at(key);
    }
    return element(node);
  }

  // A list's or map's element; the schema itself otherwise.
  static json element(const json& node) {
    if (node.value("type", "") == "array") return element(node.at("items"));
    if (node.value("type", "") == "object" && node.contains("additionalProperties") &&
        node["additionalProperties"].is_object() && !node.contains("properties")) {
      return element(node["additionalProperties"]);
    }
    return node;
  }

  // The first document that has the component (a shared one, ObjectMeta, is in all of them).
  json component(const std::string& name, const std::string& path) const {
    for (const auto& schemas : documents_) {
      if (schemas.contains(name)) return schemas[name];
    }
    fail(path, "no document in the list has the schema " + name);
  }

  static std::string reference(const json& p) {
    if (p.contains("$ref")) return p["$ref"];
    if (p.contains("allOf") && p["allOf"].size() == 1 && p["allOf"][0].contains("$ref")) {
      return p["allOf"][0]["$ref"];
    }
    return "";
  }

  void define(const std::string& name) {
    if (defined_.count(name)) return;
    if (!defining_.insert(name).second) fail(name, "a type that contains itself");
    const json& type = list_.at("types").at(name);
    const std::string schema_path = type.at("schema");
    const json schema = schema_at(schema_path);
    std::set<std::string> required;
    for (const auto& r : schema.value("required", json::array())) required.insert(r);
    const std::string comment = type.value("description", schema.value("description", ""));
    Struct s{name, "", one_line(comment), {}, true};
    for (const auto& key : type.at("fields")) {
      const std::string where = name + "." + key.get<std::string>();
      if (!schema.contains("properties") || !schema["properties"].contains(key))
        fail(where, "the schema " + schema_path + " has no such field");
      const json& property = schema["properties"][key.get<std::string>()];
      Field f;
      f.json_name = key;
      f.cpp_name = snake(key);
      f.comment = one_line(property.value("description", ""));
      f.required = required.count(key) > 0;
      const std::string override_type = type.value("field_types", json::object()).value(key, "");
      f.cpp_type = override_type.empty()
                       ? type_of(property, schema_path + "/" + key.get<std::string>(), where)
                       : wrap(property, listed(override_type, where));
      // As in Go: a field not required is a pointer (absent is not zero), except an object the
      // schema defaults to {} (metadata, spec, status of the built-in kinds).
      const bool object = list_.at("types").contains(f.cpp_type);
      const bool present = contains(type.value("present", json::array()), key);
      if (!f.required &&
          (is_scalar(f.cpp_type) || (object && !property.contains("default") && !present)))
        f.cpp_type = "std::optional<" + f.cpp_type + ">";
      s.fields.push_back(f);
    }
    structs_.push_back(s);  // after the structs of its fields
    defining_.erase(name);
    defined_.insert(name);
  }

  static bool contains(const json& names, const json& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  }

  std::string listed(const std::string& name, const std::string& where) {
    if (!list_.at("types").contains(name)) fail(where, name + " is not a listed type");
    define(name);
    return name;
  }

  // `element_type` in the list or map that `p` is, or alone.
  static std::string wrap(const json& p, const std::string& element_type) {
    if (p.value("type", "") == "array")
      return "std::vector<" + wrap(p["items"], element_type) + ">";
    if (p.value("type", "") == "object" && p.contains("additionalProperties") &&
        !p.contains("properties")) {
      return "std::map<std::string, " + wrap(p["additionalProperties"], element_type) + ">";
    }
    return element_type;
  }

  static bool is_scalar(const std::string& cpp_type) {
    return cpp_type == "std::string" || cpp_type == "int" || cpp_type == "int64_t" ||
           cpp_type == "double" || cpp_type == "bool";
  }

  // `path`: where an inline object's schema is, for finding its listed type.
  std::string type_of(const json& p, const std::string& path, const std::string& where) {
    const std::string ref = reference(p);
    if (!ref.empty()) {
      const std::string component = ref.substr(ref.rfind('/') + 1);
      const json& scalars = list_.at("scalars");
      if (scalars.contains(component)) return scalars[component];
      if (!by_schema_.count(component)) {
        fail(where, "its schema " + component + " is not listed: list it, or leave the field out");
      }
      if (by_schema_[component].empty())
        fail(where, "its schema " + component + " is listed twice: name the type in field_types");
      return listed(by_schema_[component], where);
    }
    if (p.value("x-kubernetes-int-or-string", false) || p.value("format", "") == "int-or-string")
      return "nlohmann::json";
    const std::string type = p.value("type", "");
    if (type == "string") return "std::string";
    if (type == "boolean") return "bool";
    if (type == "number") return "double";
    if (type == "integer") return p.value("format", "") == "int32" ? "int" : "int64_t";
    if (type == "array") return "std::vector<" + type_of(p.at("items"), path, where + "[]") + ">";
    if (type == "object" && p.contains("properties")) {
      if (!by_schema_.count(path)) fail(where, "list the schema " + path + " as a type");
      return listed(by_schema_[path], where);
    }
    if (type == "object" && p.contains("additionalProperties") &&
        p["additionalProperties"].is_object()) {
      return "std::map<std::string, " + type_of(p["additionalProperties"], path, where + "{}") +
             ">";
    }
    if (p.value("x-kubernetes-preserve-unknown-fields", false) || type == "object")
      return "nlohmann::json";
    fail(where, "no C++ type for this schema: " + p.dump().substr(0, 200));
  }

  const json& list_;
  std::vector<json> documents_;
  std::map<std::string, std::string> by_schema_;  // schema path -> listed type name
  std::set<std::string> defined_, defining_;
  std::vector<Struct> structs_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: generate_kube_types LIST OUT_HEADER OUT_SOURCE\n";
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    const json list = json::parse(in);
    std::string dir = argv[1];
    dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
    KubeTypes generator(list, dir);
    const Types types = generator.run();
    write_if_changed(argv[2], write_header(types));
    write_if_changed(argv[3], write_source(types));
  } catch (const std::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
