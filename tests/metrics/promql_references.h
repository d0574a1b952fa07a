#pragma once

#include <set>
#include <string>
#include <vector>

// Finds the metric names (and the label names of their matchers) that a PromQL expression reads,
// and checks them against the series tables in common/metrics/trainer_series.h and
// operator_series.h. Used to keep the Grafana dashboard and the alert rules honest.
namespace kubetune::metrics::testing {

struct MetricReference {
  std::string name;
  std::set<std::string> matcher_labels;  // label names inside {...} after the name
};

// Metric names selected by `promql`: skips functions and aggregations, keywords, label lists of
// by/without/on/ignoring/group_left/group_right, strings, numbers, durations and [..] ranges, and
// Grafana variables ($job, ${datasource}, $__rate_interval).
std::vector<MetricReference> referenced_metrics(const std::string& promql);

// A Grafana template query "label_values(<selector>, <label>)" reduces to <selector>; other
// queries are returned unchanged.
std::string grafana_query_expression(const std::string& query);

// Problems with one expression: metric names missing from the tables (after removing the
// _bucket/_sum/_count suffix of histograms) and matcher labels the metric does not carry. Scrape
// target labels (namespace, pod, instance) are allowed everywhere. `where` prefixes each message.
std::vector<std::string> check_expression(const std::string& promql, const std::string& where);

}  // namespace kubetune::metrics::testing
