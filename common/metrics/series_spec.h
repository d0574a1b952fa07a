#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/metrics/metric_type.h"

namespace kubetune::metrics {

// One metric family that a kubetune component promises to export. The tables in trainer_series.h
// and operator_series.h are the contract between the exporters, the Grafana dashboard and the
// alert rules (tests check that every name those reference is listed here).
struct SeriesSpec {
  std::string_view name;
  MetricType type;
  std::string_view help;
  // Comma-separated label names every series of the family carries, e.g. "job,rank,local_rank".
  // Target labels added by the scrape (namespace, pod, instance) are not listed.
  std::string_view labels;
};

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
inline std::vector<std::string> label_names(const SeriesSpec& spec) {
  std::vector<std::string> out;
  std::string_view rest = spec.labels;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    out.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return out;
}

// The spec named `name` in a table, or nullptr.
template <class Table>
constexpr const SeriesSpec* find_spec(const Table& table, std::string_view name) {
  for (const SeriesSpec& spec : table) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace kubetune::metrics
