#include "operator/policy/preflight_summary.h"

#include <cstdio>

#include "operator/policy/time_util.h"

namespace kubetune::op {
namespace {

std::string count(std::optional<int64_t> v) { return std::to_string(v.value_or(0)); }

}  // namespace

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
