#pragma once

#include <string>

#include "common/metrics/labels.h"

// Building blocks of the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), shared by the serializer and the
// scrape parser so both agree on one canonical spelling of a series.
namespace kubetune::metrics {

// Shortest decimal text that reads back as exactly `v`; "+Inf", "-Inf" and "NaN" as Prometheus
// spells them. Integral values print without exponent up to 2^53 ("1000000", not "1e+06").
std::string format_value(double v);

// Label values escape backslash, double quote and newline.
std::string escape_label_value(const std::string& value);

// HELP texts escape only backslash and newline.
std::string escape_help(const std::string& help);

// `name{a="x",b="y"}` with labels in name order and escaped values; just `name` without labels.
// This is also the key type of parse_text_format(), so callers can look series up with it.
std::string series_key(const std::string& name, const Labels& labels);

}  // namespace kubetune::metrics
