#pragma once

#include <string>

namespace kubetune::metrics {

// Prometheus' rule for metric names (https://prometheus.io/docs/concepts/data_model/):
// [a-zA-Z_:][a-zA-Z0-9_:]*. The scrape parser refuses a page that breaks it.
bool is_valid_metric_name(const std::string& name);

}  // namespace kubetune::metrics
