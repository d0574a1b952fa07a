#pragma once

#include <string>

#include "common/metrics/registry.h"
#include "common/metrics/series_spec.h"

// Fills a Registry with every series of trainer_series.h and operator_series.h, with plausible
// label values, so tools (promtool, Prometheus) can check the whole contract at once.
namespace kubetune::metrics::testing {

// Label values used for each label name: job = `job`, namespace = "ml", rank/local_rank 0 and 1,
// one series per phase/result value from the tables.
void populate_all_series(Registry& registry, const std::string& job);

// Registers one spec in `registry` (histograms get the buckets from the tables) and returns a
// label set covering its labels (for the first values of multi-valued labels).
Labels example_labels(const SeriesSpec& spec, const std::string& job, int rank);

}  // namespace kubetune::metrics::testing
