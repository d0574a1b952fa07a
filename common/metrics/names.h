#pragma once

#include <string>

namespace kubetune::metrics {

// Prometheus naming rules (https://prometheus.io/docs/concepts/data_model/):
//   metric names: [a-zA-Z_:][a-zA-Z0-9_:]*
//   label names:  [a-zA-Z_][a-zA-Z0-9_]*, and names starting with "__" are reserved for Prometheus.
bool is_valid_metric_name(const std::string& name);
bool is_valid_label_name(const std::string& name);

// Throw std::invalid_argument naming the offending name when it breaks the rules above.
void check_metric_name(const std::string& name);
void check_label_name(const std::string& name);

// Label values and help texts may hold any text, but Prometheus rejects a scrape whose bytes are
// not valid UTF-8, so we refuse them at the source. `what` names the field in the error message.
void check_utf8(const std::string& text, const std::string& what);

}  // namespace kubetune::metrics
