#include "operator/api/crd.h"

#include "common/train_config.h"
#include "operator/api/cel_rules.h"
#include "operator/api/names.h"
#include "operator/api/yaml_emit.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// Kubernetes resource quantities ("500m", "16Gi", 4).
const char* kQuantityPattern =
    R"(^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$)";

json quantity(const std::string& description) {
  return {{"x-kubernetes-int-or-string", true},
          {"pattern", kQuantityPattern},
          {"description", description}};
}

json workers_schema() {
  json tolerations = {
      {"type", "array"},
      {"maxItems", 64},
      {"description", "Tolerations of the worker pods (as in a PodSpec)."},
      {"items",
       {{"type", "object"},
        {"properties",
         {{"key", {{"type", "string"}, {"maxLength", 316}}},
          {"operator", {{"type", "string"}, {"enum", {"Exists", "Equal"}}}},
          {"value", {{"type", "string"}, {"maxLength", 63}}},
          {"effect",
           {{"type", "string"}, {"enum", {"", "NoSchedule", "PreferNoSchedule", "NoExecute"}}}},
          {"tolerationSeconds", {{"type", "integer"}}}}}}}};
  json env = {
      {"type", "array"},
      {"maxItems", 256},
      {"description", "Extra environment variables of the trainer container."},
      {"items",
       {{"type", "object"},
        {"required", {"name"}},
        {"properties",
         {{"name",
           {{"type", "string"}, {"maxLength", 256}, {"pattern", "^[A-Za-z_][A-Za-z0-9_]*$"}}},
          {"value", {{"type", "string"}, {"maxLength", 32768}}}}}}}};
  json security = {
      {"type", "object"},
      {"default", json::object()},
      {"description",
       "Who the trainer runs as. By default: not as root (the kubetune image runs as 65532), no "
       "privilege escalation, every Linux capability dropped, the runtime's seccomp profile."},
      {"properties",
       {{"runAsNonRoot",
         {{"type", "boolean"},
          {"default", true},
          {"description", "false allows images that run as root."}}},
        {"runAsUser", {{"type", "integer"}, {"minimum", 0}}},
        {"runAsGroup", {{"type", "integer"}, {"minimum", 0}}},
        {"fsGroup",
         {{"type", "integer"},
          {"minimum", 0},
          {"default", 65532},
          {"description",
           "Group given write access to mounted volumes (checkpoints and outputs on a PVC)."}}},
        {"addCapabilities",
         {{"type", "array"},
          {"maxItems", 64},
          {"items", {{"type", "string"}, {"maxLength", 64}, {"pattern", "^[A-Z_]+$"}}},
          {"description", "Capabilities to keep, e.g. IPC_LOCK for RDMA (InfiniBand)."}}}}}};
  return {{"type", "object"},
          {"default", json::object()},
          {"description", "The worker pods: one per node; pod i is node rank i of the gang."},
          {"properties",
           {{"replicas",
             {{"type", "integer"},
              {"minimum", 1},
              {"maximum", 1024},
              {"default", 1},
              {"description", "Number of pods (nodes)."}}},
            {"gpusPerWorker",
             {{"type", "integer"},
              {"minimum", 0},
              {"maximum", 64},
              {"default", 1},
              {"description",
               "nvidia.com/gpu limit of each pod and its number of trainer processes; 0 trains on "
               "CPU with one process."}}},
            {"image",
             {{"type", "string"},
              {"minLength", 1},
              {"maxLength", 4096},
              {"default", "ghcr.io/kubetune/kubetune:latest"},
              {"description", "Image with kubetune-trainer on its PATH."}}},
            {"imagePullPolicy",
             {{"type", "string"},
              {"enum", {"Always", "IfNotPresent", "Never"}},
              {"default", "IfNotPresent"}}},
            {"resources",
             {{"type", "object"},
              {"description", "CPU and memory of each pod (requests = limits)."},
              {"properties",
               {{"cpu", quantity("CPU cores, e.g. 8 or 7500m.")},
                {"memory", quantity("Memory, e.g. 64Gi.")}}}}},
            {"shmSize", quantity("Size of the memory-backed /dev/shm NCCL needs (default 8Gi).")},
            {"nodeSelector",
             {{"type", "object"},
              {"maxProperties", 64},
              {"additionalProperties", {{"type", "string"}, {"maxLength", 63}}}}},
            {"tolerations", tolerations},
            {"priorityClassName", {{"type", "string"}, {"maxLength", 253}}},
            {"serviceAccountName", {{"type", "string"}, {"maxLength", 253}}},
            {"securityContext", security},
            {"env", env}}}};
}

json run_policy_schema() {
  return {{"type", "object"},
          {"default", json::object()},
          {"description", "What to do about failures, time and suspension."},
          {"properties",
           {{"backoffLimit",
             {{"type", "integer"},
              {"minimum", 0},
              {"maximum", 1000},
              {"default", 3},
              {"description",
               "Gang restarts allowed after retryable failures before the job is Failed."}}},
            {"activeDeadlineSeconds",
             {{"type", "integer"},
              {"minimum", 1},
              {"description",
               "Fail the job when it has been active this long (not counting "
               "suspension)."}}},
            {"ttlSecondsAfterFinished",
             {{"type", "integer"},
              {"minimum", 0},
              {"description", "Delete the job (and its pods) this long after it finished."}}},
            {"suspend",
             {{"type", "boolean"},
              {"default", false},
              {"description",
               "true deletes the pods; false again recreates them, resuming from the last "
               "checkpoint."}}}}}};
}

json volumes_schema() {
  return {
      {"type", "array"},
      {"maxItems", 16},
      {"x-kubernetes-list-type", "map"},
      {"x-kubernetes-list-map-keys", {"name"}},
      {"description",
       "Storage mounted into every worker: the model, data, output and checkpoint paths live "
       "here."},
      {"items",
       {{"type", "object"},
        {"required", {"name", "mountPath"}},
        {"properties",
         {{"name",
           {{"type", "string"}, {"maxLength", 63}, {"pattern", "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}}},
          {"mountPath",
           {{"type", "string"},
            {"maxLength", 4096},
            {"pattern", "^(/[^/]+)+$"},
            {"description", "Absolute path without a trailing slash."}}},
          {"readOnly", {{"type", "boolean"}, {"default", false}}},
          {"persistentVolumeClaim",
           {{"type", "object"},
            {"required", {"claimName"}},
            {"properties",
             {{"claimName", {{"type", "string"}, {"minLength", 1}, {"maxLength", 253}}}}}}},
          {"hostPath",
           {{"type", "object"},
            {"required", {"path"}},
            {"properties",
             {{"path", {{"type", "string"}, {"maxLength", 4096}, {"pattern", "^/"}}},
              {"type",
               {{"type", "string"},
                {"enum", {"", "Directory", "DirectoryOrCreate", "File", "FileOrCreate"}},
                {"default", ""}}}}}}}}}}}};
}

json condition_schema() {
  return {{"type", "object"},
          {"required", {"type", "status", "lastTransitionTime", "reason", "message"}},
          {"properties",
           {{"type", {{"type", "string"}, {"maxLength", 316}}},
            {"status", {{"type", "string"}, {"enum", {"True", "False", "Unknown"}}}},
            {"observedGeneration", {{"type", "integer"}, {"minimum", 0}}},
            {"lastTransitionTime", {{"type", "string"}, {"format", "date-time"}}},
            {"reason", {{"type", "string"}, {"maxLength", 1024}}},
            {"message", {{"type", "string"}, {"maxLength", 32768}}}}}};
}

json make_status_schema() {
  json integer = {{"type", "integer"}};
  json number = {{"type", "number"}};
  json time = {{"type", "string"}, {"format", "date-time"}};
  return {
      {"type", "object"},
      {"properties",
       {{"phase",
         {{"type", "string"},
          {"enum",
           {"Pending", "Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed"}}}},
        {"observedGeneration", integer},
        {"conditions",
         {{"type", "array"},
          {"maxItems", 16},
          {"x-kubernetes-list-type", "map"},
          {"x-kubernetes-list-map-keys", {"type"}},
          {"items", condition_schema()}}},
        {"startTime", time},
        {"completionTime", time},
        {"restarts", {{"type", "integer"}, {"description", "Gang restarts so far."}}},
        {"workers",
         {{"type", "object"},
          {"properties",
           {{"active", integer},
            {"succeeded", integer},
            {"failed", integer},
            {"created",
             {{"type", "integer"},
              {"description", "Pods created for the current gang (= status.restarts)."}}}}}}},
        {"progress",
         {{"type", "object"},
          {"description", "Read from rank 0's metrics endpoint."},
          {"properties",
           {{"step", integer},
            {"totalSteps", integer},
            {"summary",
             {{"type", "string"}, {"maxLength", 64}, {"description", "step/totalSteps"}}},
            {"epoch", number},
            {"loss", number},
            {"tokensPerSecond", number},
            {"etaSeconds", number},
            {"updateTime", time}}}}},
        {"lastCheckpoint",
         {{"type", "object"},
          {"description",
           "count = kubetune_checkpoints_total of rank 0; step = the step seen when it grew."},
          {"properties",
           {{"count", integer},
            {"step", integer},
            {"path", {{"type", "string"}, {"maxLength", 4096}}},
            {"time", time}}}}}}}};
}

// Attaches each CEL rule to the schema node named by its `where`.
void attach_cel_rules(json& root) {
  for (const auto& r : cel_rules()) {
    json* node = &root;
    if (r.where == "spec") node = &root["properties"]["spec"];
    if (r.where == "spec.volumes[]")
      node = &root["properties"]["spec"]["properties"]["volumes"]["items"];
    (*node)["x-kubernetes-validations"].push_back({{"rule", r.rule}, {"message", r.message}});
  }
}

json make_job_schema() {
  json spec = to_structural(train_config_schema());
  spec["description"] =
      "What to train (the trainer's config: model, data, method, training, output, checkpoint, "
      "distributed, metrics) and how to run it (workers, runPolicy, volumes).";
  for (auto it = operator_spec_schema()["properties"].begin();
       it != operator_spec_schema()["properties"].end(); ++it) {
    spec["properties"][it.key()] = it.value();
  }
  json root = {{"type", "object"},
               {"required", {"spec"}},
               {"properties",
                {{"apiVersion", {{"type", "string"}}},
                 {"kind", {{"type", "string"}}},
                 {"metadata", {{"type", "object"}}},
                 {"spec", spec},
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
  return {col("Phase", "string", ".status.phase"),
          col("Progress", "string", ".status.progress.summary"),
          col("Loss", "number", ".status.progress.loss"),
          col("Tokens/s", "number", ".status.progress.tokensPerSecond"),
          restarts,
          col("Age", "date", ".metadata.creationTimestamp")};
}

}  // namespace

json to_structural(json schema) {
  if (schema.is_object()) {
    if (schema.contains("additionalProperties") && schema["additionalProperties"].is_boolean()) {
      schema.erase("additionalProperties");
    }
    for (auto& [key, value] : schema.items()) value = to_structural(value);
  } else if (schema.is_array()) {
    for (auto& v : schema) v = to_structural(v);
  }
  return schema;
}

const json& operator_spec_schema() {
  static const json s = {{"type", "object"},
                         {"properties",
                          {{"workers", workers_schema()},
                           {"runPolicy", run_policy_schema()},
                           {"volumes", volumes_schema()}}}};
  return s;
}

const json& status_schema() {
  static const json s = make_status_schema();
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

std::string crd_yaml() {
  return "# Generated by `kubetune-operator crd`; do not edit (tests/operator checks it).\n" +
         json_to_yaml(crd());
}

}  // namespace kubetune::op
