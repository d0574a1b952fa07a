#pragma once

#include <prometheus/registry.h>

#include <string>

#include "common/metrics/labels.h"
#include "common/metrics/series_spec.h"

// Fills a prometheus-cpp registry with every series of trainer_series.h and operator_series.h, with
// plausible label values, so tools (promtool, Prometheus) can check the whole contract at once.
namespace kubetune::metrics::testing {

// Label values used for each label name: job = `job`, namespace = "ml", rank/local_rank 0 and 1,
// one series per phase/result value from the tables.
void populate_all_series(prometheus::Registry& registry, const std::string& job);

// A label set covering the labels of `spec` (the first values of multi-valued labels).
Labels example_labels(const SeriesSpec& spec, const std::string& job, int rank);

}  // namespace kubetune::metrics::testing
