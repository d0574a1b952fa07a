#include "operator/api/preflight_report.h"

#include <cstdio>

#include "operator/controller/time_util.h"

namespace kubetune::op {

using nlohmann::json;

namespace {

// report[a][b] when it is a number, else 0.
double number_at(const json& report, const char* a, const char* b) {
  if (!report.contains(a) || !report[a].is_object() || !report[a].contains(b)) return 0;
  const json& v = report[a][b];
  return v.is_number() ? v.get<double>() : 0;
}

std::string count(double v) { return std::to_string(static_cast<long long>(v)); }

}  // namespace

std::string report_text(const json& report, const char* key, const std::string& otherwise) {
  if (!report.is_object() || !report.contains(key) || !report[key].is_string()) return otherwise;
  return report[key].get<std::string>();
}

std::string preflight_summary(const json& report) {
  if (!report.is_object()) return "no report";
  const std::string verdict = report_text(report, "verdict", "?");
  const std::string message = report_text(report, "message");
  if (!report.contains("data") || !report["data"].is_object()) {
    return verdict + (message.empty() ? "" : ": " + message);
  }
  char memory[64];
  std::snprintf(memory, sizeof memory, "est. %.1f GiB per GPU",
                number_at(report, "memory", "totalGiB"));
  std::string line = count(number_at(report, "steps", "total")) + " steps, " +
                     count(number_at(report["data"], "train", "records")) + " records, " +
                     count(number_at(report["data"], "train", "tokens")) + " tokens, ";
  if (const double size = number_at(report, "microBatch", "size"); size > 0) {
    const bool automatic = report["microBatch"].value("auto", false);
    line += "micro-batch " + count(size) + " x " +
            count(number_at(report, "microBatch", "accumulation")) + " accumulation" +
            (automatic ? " (auto)" : "") + ", ";
  }
  line += memory;
  if (const double seconds = number_at(report, "time", "totalSeconds"); seconds > 0) {
    line += ", ~" + format_duration(seconds) + " on H100/H200";
  }
  line += ": " + verdict;
  if (!message.empty()) line += ": " + message;
  return line;
}

}  // namespace kubetune::op
