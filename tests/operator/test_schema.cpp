// The CRD: generated from the shared training schema, checked in unchanged, structural, and it
// accepts the examples in examples/jobs while rejecting the broken ones with their message.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "common/metrics/operator_series.h"
#include "common/schema_validator.h"
#include "common/train_config.h"
#include "common/yaml_file.h"
#include "operator/api/cel_rules.h"
#include "operator/api/crd.h"
#include "operator/api/job.h"
#include "operator/api/preflight_report.h"
#include "operator/policy/phase.h"
#include "operator/policy/preflight_summary.h"
#include "operator/render/yaml_emit.h"
#include "test_support.h"

namespace kubetune::op {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::read_text;
using testing::source_dir;

std::string crd_path() { return source_dir() + "/charts/kubetune/crds/finetunejobs.yaml"; }

// The schema as the checked-in file has it (what a cluster gets with kubectl apply).
json checked_in_schema() {
  const json crd = yaml_to_json(read_text(crd_path()), crd_path());
  return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
}

std::vector<std::string> validate_with_checked_in_crd(json object) {
  std::vector<std::string> problems;
  object.erase("status");
  validate_against_schema(checked_in_schema(), object, "", cel_evaluators(), problems);
  return problems;
}

std::vector<std::string> example_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

TEST(Crd, CheckedInFileEqualsGeneratedOne) {
  EXPECT_EQ(read_text(crd_path()), crd_yaml())
      << "regenerate with: kubetune-operator crd > charts/kubetune/crds/finetunejobs.yaml";
}

TEST(Crd, YamlReadsBackAsTheSameObject) { EXPECT_EQ(yaml_to_json(crd_yaml(), "crd"), crd()); }

TEST(Crd, NamesStatusSubresourceAndPrinterColumns) {
  const json c = crd();
  EXPECT_EQ(c["metadata"]["name"], "finetunejobs.kubetune.io");
  EXPECT_EQ(c["spec"]["names"]["shortNames"], json::array({"ftj"}));
  const json& v = c["spec"]["versions"][0];
  EXPECT_EQ(v["name"], "v1alpha1");
  EXPECT_TRUE(v["subresources"].contains("status"));
  std::set<std::string> columns;
  for (const auto& col : v["additionalPrinterColumns"]) columns.insert(col["name"]);
  for (const char* want : {"Phase", "Progress", "Loss", "Tokens/s", "Age"}) {
    EXPECT_TRUE(columns.count(want)) << want;
  }
}

TEST(Crd, TrainingPartIsTheTrainersSchema) {
  // Defined once: every training key and its defaults come from train_config_schema().
  const json spec = job_schema()["properties"]["spec"];
  const json train = to_structural(train_config_schema());
  for (auto it = train["properties"].begin(); it != train["properties"].end(); ++it) {
    json in_crd = spec["properties"][it.key()];
    in_crd.erase("x-kubernetes-validations");  // the CRD's CEL rules (cel_rules.h) on top
    EXPECT_EQ(in_crd, it.value()) << it.key();
  }
  for (const char* key : {"workers", "runPolicy", "volumes"}) {
    EXPECT_TRUE(spec["properties"].contains(key)) << key;
  }
}

// Structural schema rules the API server enforces: every node has a type (or is
// int-or-string), no additionalProperties next to properties, no `additionalProperties: false`.
void expect_structural(const json& s, const std::string& path) {
  if (!s.value("x-kubernetes-int-or-string", false)) {
    EXPECT_TRUE(s.contains("type")) << path << " has no type";
  }
  EXPECT_FALSE(s.contains("additionalProperties") && s["additionalProperties"].is_boolean())
      << path;
  EXPECT_FALSE(s.contains("properties") && s.contains("additionalProperties")) << path;
  if (s.contains("properties")) {
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
      expect_structural(it.value(), path + "." + it.key());
    }
  }
  if (s.contains("items")) expect_structural(s["items"], path + "[]");
  if (s.contains("additionalProperties")) expect_structural(s["additionalProperties"], path + "{}");
  if (s.contains("default")) {
    json value = s["default"];
    std::vector<std::string> problems;
    validate_against_schema(s, value, path, cel_evaluators(), problems);
    EXPECT_TRUE(problems.empty()) << path << ": default does not validate: " << joined(problems);
  }
}

TEST(Crd, SchemaIsStructural) { expect_structural(job_schema(), "<root>"); }

TEST(Crd, EveryCelRuleIsInTheCrdAndHasAnEvaluator) {
  // CEL cannot be evaluated here: the C++ twins stand in for it, and this keeps both sides in
  // step. The validator reports a rule with no twin as a problem (see the next test).
  const std::string text = read_text(crd_path());
  for (const auto& r : cel_rules()) {
    EXPECT_NE(text.find(r.rule), std::string::npos) << "rule missing from the CRD: " << r.rule;
    EXPECT_NE(text.find(r.message), std::string::npos) << r.message;
  }
  json rules = json::array();
  std::function<void(const json&)> collect = [&](const json& s) {
    if (s.is_object()) {
      for (const auto& v : s.value("x-kubernetes-validations", json::array())) rules.push_back(v);
      for (auto it = s.begin(); it != s.end(); ++it) collect(it.value());
    } else if (s.is_array()) {
      for (const auto& v : s) collect(v);
    }
  };
  collect(checked_in_schema());
  EXPECT_EQ(rules.size(), cel_rules().size());
  const auto evaluators = cel_evaluators();
  for (const auto& r : rules) EXPECT_TRUE(evaluators.count(r["rule"])) << r["rule"];
}

// The API server refuses a CRD whose CEL rules may cost too much, and estimates that cost from
// the largest value a rule can reach: every string, list and map needs a bound (the first CRD
// was refused for `output.dir` and `mountPath`). Bounding them all keeps a new rule safe.
TEST(Crd, EveryStringListAndMapIsBounded) {
  std::vector<std::string> unbounded;
  std::function<void(const json&, const std::string&)> walk = [&](const json& s,
                                                                  const std::string& path) {
    const std::string type = s.value("type", "");
    if (type == "string" && !s.contains("maxLength") && !s.contains("enum") &&
        s.value("format", "") != "date-time") {
      unbounded.push_back(path + " (string: maxLength)");
    }
    if (type == "array" && !s.contains("maxItems")) unbounded.push_back(path + " (maxItems)");
    if (type == "object" && s.contains("additionalProperties") && !s.contains("maxProperties")) {
      unbounded.push_back(path + " (map: maxProperties)");
    }
    const json properties = s.value("properties", json::object());
    for (const auto& [k, v] : properties.items()) walk(v, path + "." + k);
    if (s.contains("items")) walk(s["items"], path + "[]");
    if (s.contains("additionalProperties") && s["additionalProperties"].is_object()) {
      walk(s["additionalProperties"], path + "{}");
    }
  };
  const json schema = checked_in_schema();
  walk(schema["properties"]["spec"], "spec");
  walk(schema["properties"]["status"], "status");
  EXPECT_EQ(joined(unbounded), "");
}

// Every number a user writes has a maximum, so the CRD, `kubetune validate` and the trainer
// refuse 2^32 with the field's name instead of the trainer storing it in an int.
TEST(Crd, EveryNumberOfTheSpecHasAMaximum) {
  std::vector<std::string> unbounded;
  std::function<void(const json&, const std::string&)> walk = [&](const json& s,
                                                                  const std::string& path) {
    const std::string type = s.value("type", "");
    if ((type == "integer" || type == "number") && !s.contains("maximum") && !s.contains("enum")) {
      unbounded.push_back(path);
    }
    const json properties = s.value("properties", json::object());
    for (const auto& [k, v] : properties.items()) walk(v, path + "." + k);
    if (s.contains("items")) walk(s["items"], path + "[]");
  };
  walk(checked_in_schema()["properties"]["spec"], "spec");
  EXPECT_EQ(joined(unbounded), "");
}

TEST(Validation, HugeNumbersAreRefusedWithTheirField) {
  const std::vector<std::pair<std::string, json>> cases = {
      {"spec.training.microBatchSize", 4294967296LL},
      {"spec.training.epochs", 2147483648LL},
      {"spec.checkpoint.keepLast", 4294967296LL},
      {"spec.training.gradientAccumulationSteps", 2147483648LL},
      {"spec.training.globalBatchSize", 4294967296LL},
      {"spec.runPolicy.activeDeadlineSeconds", 10000000000LL},
      {"spec.training.learningRate", 1e308},
  };
  for (const auto& [field, value] : cases) {
    json obj = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
    json* node = &obj;
    for (size_t start = 0, dot; start != std::string::npos;
         start = dot == std::string::npos ? dot : dot + 1) {
      dot = field.find('.', start);
      node = &(*node)[field.substr(start, dot == std::string::npos ? dot : dot - start)];
    }
    *node = value;
    EXPECT_NE(joined(validate_job(obj)).find(field + ": must be <= "), std::string::npos) << field;
  }
}

// An empty target list is not "every linear layer".
TEST(Validation, EmptyLoraTargetsAreRefused) {
  json obj = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
  obj["spec"]["method"]["lora"]["targetModules"] = json::array();
  EXPECT_NE(joined(validate_job(obj)).find("spec.method.lora.targetModules: must have at least 1"),
            std::string::npos)
      << joined(validate_job(obj));
}

// kubectl needs both to route a manifest; a namespace is a DNS-1123 label; two volumes on one path
// cannot both be mounted.
TEST(Validation, ManifestIdentityAndMountsAreChecked) {
  const json good = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& o) { o.erase("apiVersion"); }, "apiVersion: must be kubetune.io/v1alpha1"},
      {[](json& o) { o.erase("kind"); }, "kind: must be FineTuneJob"},
      {[](json& o) { o["metadata"]["namespace"] = "Not_A_Namespace"; },
       "metadata.namespace: must be a DNS-1123 label"},
      {[](json& o) { o["metadata"]["namespace"] = std::string(64, 'a'); },
       "metadata.namespace: must be a DNS-1123 label"},
      {[](json& o) {
         json second = o["spec"]["volumes"][0];
         second["name"] = "second";
         o["spec"]["volumes"].push_back(second);
       },
       "two of spec.volumes have the same mountPath"},
  };
  for (const auto& [edit, needle] : cases) {
    json obj = good;
    edit(obj);
    EXPECT_NE(joined(validate_job(obj)).find(needle), std::string::npos)
        << needle << " in: " << joined(validate_job(obj));
  }
}

// Spec edits: only runPolicy changes while a job runs; anything while it is suspended.
class SpecTransition : public ::testing::Test {
 protected:
  void SetUp() override {
    stored = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
    ASSERT_EQ(joined(validate_job(stored)), "");  // defaulted, as the API server stores it
  }
  std::string update(const std::function<void(json&)>& edit) {
    json updated = stored;
    edit(updated);
    std::vector<std::string> problems;
    validate_against_schema(checked_in_schema(), updated, "", cel_evaluators(), problems, &stored);
    return joined(problems);
  }
  json stored;
};

TEST_F(SpecTransition, TrainingAndWorkersAreFixedWhileRunning) {
  const std::string why = "only spec.runPolicy can change while a job runs";
  EXPECT_NE(update([](json& o) { o["spec"]["training"]["learningRate"] = 0.5; }).find(why),
            std::string::npos);
  EXPECT_NE(update([](json& o) { o["spec"]["workers"]["replicas"] = 3; }).find(why),
            std::string::npos);
  EXPECT_NE(update([](json& o) { o["spec"].erase("volumes"); }).find(why), std::string::npos);
  EXPECT_EQ(update([](json&) {}), "");
}

TEST_F(SpecTransition, RunPolicyChangesAndSuspendedJobsTakeAnyEdit) {
  EXPECT_EQ(update([](json& o) { o["spec"]["runPolicy"]["backoffLimit"] = 9; }), "");
  EXPECT_EQ(update([](json& o) { o["spec"]["runPolicy"]["suspend"] = true; }), "");
  stored["spec"]["runPolicy"]["suspend"] = true;
  EXPECT_EQ(update([](json& o) {
              o["spec"]["workers"]["replicas"] = 3;
              o["spec"]["runPolicy"]["suspend"] = false;
            }),
            "");
}

TEST_F(SpecTransition, CreatesSkipTransitionRules) {
  json fresh = stored;
  fresh["spec"]["workers"]["replicas"] = 3;
  EXPECT_EQ(joined(validate_with_checked_in_crd(fresh)), "");
}

// One list of phases: the schema's enum, the operator's Phase and the metrics' state set.
TEST(Crd, PhasesAgreeWithTheOperatorAndItsMetrics) {
  std::vector<std::string> ours, metric_values;
  for (Phase p : kAllPhases) {
    ours.emplace_back(to_string(p));
    Phase parsed = Phase::kFailed;
    EXPECT_TRUE(parse(to_string(p), parsed));
    EXPECT_EQ(parsed, p);
  }
  for (auto v : metrics::operator_series::kJobPhases) metric_values.emplace_back(v);
  const json schema = checked_in_schema()["properties"]["status"]["properties"]["phase"]["enum"];
  EXPECT_EQ(schema.get<std::vector<std::string>>(), ours);
  EXPECT_EQ(metric_values, ours);
  Phase bogus = Phase::kFailed;
  EXPECT_FALSE(parse("Bogus", bogus));
}

TEST(Crd, RuleWithoutEvaluatorIsReported) {
  json schema = {{"type", "object"},
                 {"x-kubernetes-validations", {{{"rule", "self.x > 1"}, {"message", "m"}}}}};
  json value = json::object();
  std::vector<std::string> problems;
  validate_against_schema(schema, value, "spec", cel_evaluators(), problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("no C++ evaluator"), std::string::npos);
}

TEST(Examples, ValidOnesPass) {
  const auto files = example_files(source_dir() + "/examples/jobs");
  ASSERT_GE(files.size(), 3u);
  for (const auto& f : files) {
    const json obj = load_yaml_or_json_file(f);
    EXPECT_EQ(joined(validate_with_checked_in_crd(obj)), "") << f;
    EXPECT_NO_THROW(parse_job(obj)) << f;  // the operator's own check (adds the trainer's)
  }
}

// The generated spec type holds every field a real manifest uses: the typed spec written back is
// the defaulted spec the API server stores.
TEST(Examples, TypedSpecHoldsEveryField) {
  for (const auto& f : example_files(source_dir() + "/examples/jobs")) {
    const FineTuneJob job = parse_job(load_yaml_or_json_file(f));
    json expected = job.spec_json;
    expected["metrics"]["jobName"] = job.name;  // parse_job names the series after the job
    EXPECT_EQ(json(job.spec), expected) << f;
  }
}

// So does the generated status type, for a status with every field the operator writes.
// A preflight report is trusted only as the schema allows it: types, and the limits the API server
// would enforce on the status it goes into (else every later status write would be refused).
TEST(PreflightReport, OnlyWhatTheSchemaAllowsIsRead) {
  const auto ok = parse_preflight_report(
      R"({"verdict": "OK", "steps": {"total": 12}, "microBatch": {"size": 8, "auto": true},
          "data": {"train": {"records": 24, "invalidLines": [{"line": 9, "error": "x"}]}}})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->steps.total, 12);
  EXPECT_EQ(ok->micro_batch.auto_, true);
  EXPECT_EQ(ok->data.train.invalid_lines.at(0).line, 9);
  EXPECT_EQ(preflight_summary(*ok),
            "12 steps, 24 records, 0 tokens, micro-batch 8 x 0 accumulation (auto), est. 0.0 GiB "
            "per GPU: OK");
  nlohmann::json many = {{"verdict", "DoesNotFit"}};
  for (int i = 0; i < 65; ++i) many["microBatch"]["candidates"].push_back({{"size", i}});
  EXPECT_FALSE(parse_preflight_report(many.dump()));  // maxItems 64
  EXPECT_FALSE(parse_preflight_report(R"({"verdict": "OK", "memory": "big"})"));
  EXPECT_FALSE(parse_preflight_report(R"({"verdict": "Fine"})"));
  EXPECT_FALSE(parse_preflight_report("error: cannot open /data/models/x/config.json"));
}

TEST(Crd, TypedStatusHoldsEveryField) {
  const json status = json::parse(R"({
    "phase": "Running", "observedGeneration": 3, "restarts": 1,
    "startTime": "2026-11-23T10:00:00Z", "completionTime": "2026-11-23T11:00:00Z",
    "conditions": [{"type": "Running", "status": "True", "reason": "AllWorkersRunning",
                    "message": "all 2 workers are running", "observedGeneration": 3,
                    "lastTransitionTime": "2026-11-23T10:01:00Z"}],
    "workers": {"active": 2, "created": 2, "failed": 0, "succeeded": 0},
    "progress": {"step": 10, "totalSteps": 100, "summary": "10/100", "epoch": 0.1, "loss": 2.5,
                 "tokensPerSecond": 1000.5, "etaSeconds": 90, "eta": "1m30s",
                 "stepTime": "2026-11-23T10:02:00Z", "updateTime": "2026-11-23T10:02:00Z"},
    "lastCheckpoint": {"count": 1, "step": 10, "path": "/out/checkpoints",
                       "time": "2026-11-23T10:02:00Z"},
    "preflight": {"specHash": "abc", "failures": 0, "verdict": "OK", "summary": "fits",
                  "completionTime": "2026-11-23T10:00:30Z", "gpuMemoryGiB": 80,
                  "gpuMemorySource": "workers.gpuMemoryGiB", "report": {"steps": {"total": 100}, "microBatch": {"size": 8, "auto": true}}}})");
  EXPECT_EQ(json(status.get<api::FineTuneJobStatus>()), status);
  // Every property of the schema's status was set above.
  for (const auto& [key, property] :
       checked_in_schema()["properties"]["status"]["properties"].items()) {
    EXPECT_TRUE(status.contains(key)) << key;
  }
}

// Each broken example names our expected message on a "# expect: " first line (and the API
// server's on a "# server: " line, which tests/e2e checks against a real one).
TEST(Examples, BrokenOnesFailWithTheExpectedMessage) {
  const auto files = example_files(source_dir() + "/examples/jobs/invalid");
  ASSERT_GE(files.size(), 5u);
  static const std::regex expect_line("^# expect: (.*)$");
  for (const auto& f : files) {
    std::smatch m;
    const std::string text = read_text(f);
    const std::string first = text.substr(0, text.find('\n'));
    ASSERT_TRUE(std::regex_match(first, m, expect_line)) << f << ": no '# expect:' first line";
    const std::string expected = m[1];
    const auto problems = validate_with_checked_in_crd(load_yaml_or_json_file(f));
    const std::string all = joined(problems);
    EXPECT_NE(all.find(expected), std::string::npos)
        << f << "\nexpected: " << expected << "\ngot:\n"
        << all;
    // The operator rejects it with the same message.
    try {
      parse_job(load_yaml_or_json_file(f));
      ADD_FAILURE() << f << ": parse_job accepted it";
    } catch (const SpecError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << f << "\n" << e.what();
    }
  }
}

TEST(Validation, DefaultsAreAppliedLikeTheApiServer) {
  json obj = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-cpu-hostpath.yaml");
  ASSERT_TRUE(validate_job(obj).empty());
  EXPECT_EQ(obj["spec"]["workers"]["replicas"], 1);
  EXPECT_EQ(obj["spec"]["runPolicy"]["backoffLimit"], 3);
  EXPECT_EQ(obj["spec"]["runPolicy"]["suspend"], false);
  EXPECT_EQ(obj["spec"]["method"]["type"], "lora");
  EXPECT_EQ(obj["spec"]["method"]["lora"]["r"], 16);
  EXPECT_EQ(obj["spec"]["volumes"][0]["readOnly"], false);
}

TEST(Validation, ListsEveryProblemWithItsPath) {
  json obj = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
  obj["spec"]["workers"]["replicas"] = "two";
  obj["spec"]["runPolicy"] = {{"backoffLimit", -1}};
  obj["spec"]["volumes"].push_back(obj["spec"]["volumes"][0]);  // duplicate name
  const std::string all = joined(validate_job(obj));
  EXPECT_NE(all.find("spec.workers.replicas: must be an integer (got string \"two\")"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("spec.runPolicy.backoffLimit: must be >= 0"), std::string::npos) << all;
  EXPECT_NE(all.find("spec.volumes[1]: duplicate entry"), std::string::npos) << all;
}

TEST(Validation, QuantitiesAreIntOrString) {
  json obj = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
  obj["spec"]["workers"]["resources"] = {{"cpu", "500m"}, {"memory", "lots"}};
  const std::string all = joined(validate_job(obj));
  EXPECT_EQ(all.find("resources.cpu"), std::string::npos) << all;
  EXPECT_NE(all.find("spec.workers.resources.memory: \"lots\" does not match"), std::string::npos)
      << all;
}

}  // namespace
}  // namespace kubetune::op
