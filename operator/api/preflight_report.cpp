#include "operator/api/preflight_report.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/schema_validator.h"
#include "common/train_config.h"
#include "operator/controller/time_util.h"

namespace kubetune::op {
namespace {

std::string count(std::optional<int64_t> v) { return std::to_string(v.value_or(0)); }

}  // namespace

std::optional<api::PreflightReport> parse_preflight_report(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  // The schema's limits too (lengths, list sizes), not only its types: a report the API server
  // would refuse in the status would make every later status write fail.
  static const nlohmann::json& schema = finetunejob_schema().at(
      "/status/properties/preflight/properties/report"_json_pointer);  // json: a JSON Schema
  std::vector<std::string> problems;
  validate_against_schema(schema, j, "report", {}, problems);
  if (!problems.empty()) return std::nullopt;
  try {
    return j.get<api::PreflightReport>();
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string preflight_summary(const api::PreflightReport& r) {
  const std::string verdict = r.verdict ? api::to_string(*r.verdict) : "?";
  const std::string message = r.message.value_or("");
  if (!r.data.train.records) return verdict + (message.empty() ? "" : ": " + message);
  std::string line = count(r.steps.total) + " steps, " + count(r.data.train.records) +
                     " records, " + count(r.data.train.tokens) + " tokens, ";
  if (r.micro_batch.size.value_or(0) > 0) {
    line += "micro-batch " + count(r.micro_batch.size) + " x " + count(r.micro_batch.accumulation) +
            " accumulation" + (r.micro_batch.auto_.value_or(false) ? " (auto)" : "") + ", ";
  }
  char memory[64];
  std::snprintf(memory, sizeof memory, "est. %.1f GiB per GPU", r.memory.total_gib.value_or(0));
  line += memory;
  if (const double seconds = r.time.total_seconds.value_or(0); seconds > 0) {
    line += ", ~" + format_duration(seconds) + " on H100/H200";
  }
  line += ": " + verdict;
  if (!message.empty()) line += ": " + message;
  return line;
}

std::string preflight_summary(const std::optional<api::PreflightReport>& report) {
  return report ? preflight_summary(*report) : "no report";
}

}  // namespace kubetune::op
