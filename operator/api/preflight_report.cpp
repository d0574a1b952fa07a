#include "operator/api/preflight_report.h"

#include <nlohmann/json.hpp>

#include "common/schema_validator.h"
#include "common/train_config.h"

namespace kubetune::op {

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

}  // namespace kubetune::op
