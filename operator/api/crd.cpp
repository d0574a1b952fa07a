#include "operator/api/crd.h"

#include "common/contracts.h"
#include "common/train_config.h"
#include "operator/api/cel_rules.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// The schema node of `where`: "" (the object), "spec", "spec.model", "spec.volumes[]".
json& schema_node(json& root, const std::string& where) {
  json* node = &root;
  size_t begin = 0;
  while (begin < where.size()) {
    size_t end = where.find('.', begin);
    if (end == std::string::npos) end = where.size();
    std::string name = where.substr(begin, end - begin);
    const bool items = name.size() > 2 && name.compare(name.size() - 2, 2, "[]") == 0;
    if (items) name.resize(name.size() - 2);
    node = &(*node)["properties"][name];
    if (items) node = &(*node)["items"];
    begin = end + 1;
  }
  return *node;
}

// Attaches each CEL rule to the schema node named by its `where`.
void attach_cel_rules(json& root) {
  for (const auto& r : cel_rules()) {
    schema_node(root, r.where)["x-kubernetes-validations"].push_back(
        {{"rule", r.rule}, {"message", r.message}});
  }
}

json make_job_schema() {
  json root = {{"type", "object"},
               {"required", {"spec"}},
               {"properties",
                {{"apiVersion", {{"type", "string"}}},
                 {"kind", {{"type", "string"}}},
                 {"metadata", {{"type", "object"}}},
                 {"spec", to_structural(finetunejob_schema()["spec"])},
                 {"status", status_schema()}}}};
  attach_cel_rules(root);
  return root;
}

json printer_columns() {
  auto col = [](const char* name, const char* type, const char* path) {
    return json{{"name", name}, {"type", type}, {"jsonPath", path}};
  };
  json restarts = col("Restarts", "integer", ".status.restarts");
  restarts["priority"] = 1;  // kubectl get -o wide
  // Why a gang is not running yet: the scheduler's word (Unschedulable, PartiallyScheduled,
  // SchedulingTimeout, AllScheduled), and with -o wide its message.
  json scheduled =
      col("Scheduled", "string", R"(.status.conditions[?(@.type=="Scheduled")].reason)");
  json waiting = col("Message", "string", R"(.status.conditions[?(@.type=="Scheduled")].message)");
  waiting["priority"] = 1;
  // What the workers run at: training.microBatchSize, auto's choice, or less after an OOM.
  json micro_batch = col("MicroBatch", "integer", ".status.progress.microBatchSize");
  micro_batch["priority"] = 1;
  return {col("Phase", "string", ".status.phase"), scheduled,
          col("Progress", "string", ".status.progress.summary"),
          col("Loss", "number", ".status.progress.loss"),
          // Preference objectives (empty for SFT): TRL's rewards/accuracies and rewards/margins.
          col("Accuracy", "number", ".status.progress.rewardAccuracy"),
          col("Margin", "number", ".status.progress.rewardMargin"),
          col("Tokens/s", "number", ".status.progress.tokensPerSecond"),
          col("ETA", "string", ".status.progress.eta"), restarts, micro_batch, waiting,
          col("Age", "date", ".metadata.creationTimestamp")};
}

}  // namespace

json to_structural(json schema) {
  if (schema.is_object()) {
    if (schema.contains("additionalProperties") && schema["additionalProperties"].is_boolean()) {
      schema.erase("additionalProperties");
    }
    for (auto it = schema.begin(); it != schema.end();) {
      // Our own markers are not OpenAPI: the API server would refuse them.
      it = it.key().rfind("x-kubetune-", 0) == 0 ? schema.erase(it) : std::next(it);
    }
    for (auto& [key, value] : schema.items()) value = to_structural(value);
  } else if (schema.is_array()) {
    for (auto& v : schema) v = to_structural(v);
  }
  return schema;
}

const json& status_schema() {
  static const json s = to_structural(finetunejob_schema()["status"]);
  return s;
}

const json& job_schema() {
  static const json s = make_job_schema();
  return s;
}

json crd() {
  json version = {{"name", kVersion},
                  {"served", true},
                  {"storage", true},
                  {"subresources", {{"status", json::object()}}},
                  {"additionalPrinterColumns", printer_columns()},
                  {"schema", {{"openAPIV3Schema", job_schema()}}}};
  return {{"apiVersion", "apiextensions.k8s.io/v1"},
          {"kind", "CustomResourceDefinition"},
          {"metadata",
           {{"name", std::string(kPlural) + "." + kGroup},
            {"labels", {{"app.kubernetes.io/name", "kubetune"}}}}},
          {"spec",
           {{"group", kGroup},
            {"scope", "Namespaced"},
            {"names",
             {{"kind", kKind},
              {"listKind", std::string(kKind) + "List"},
              {"plural", kPlural},
              {"singular", "finetunejob"},
              {"shortNames", {kShortName}},
              {"categories", {"kubetune"}}}},
            {"versions", json::array({version})}}}};
}

}  // namespace kubetune::op
