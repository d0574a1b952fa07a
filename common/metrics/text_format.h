#pragma once

#include <string>

#include "common/metrics/labels.h"

// The canonical spelling of a series of the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): the keys of the scrape parser.
// Writing the format is prometheus-cpp's (prometheus::TextSerializer).
namespace kubetune::metrics {

// Label values escape backslash, double quote and newline.
std::string escape_label_value(const std::string& value);

// `name{a="x",b="y"}` with labels in name order and escaped values; just `name` without labels.
// This is also the key type of parse_text_format(), so callers can look series up with it.
std::string series_key(const std::string& name, const Labels& labels);

}  // namespace kubetune::metrics
