#pragma once

#include <map>
#include <optional>
#include <string>

// Client side of the metrics endpoint: the operator reads a job's progress (step, loss, tokens/s)
// from rank 0's /metrics with these.
namespace kubetune::metrics {

// GET `url` and return the body. Throws std::runtime_error naming the URL on connection failure,
// timeout (`timeout_ms`) or a status other than 200.
std::string http_get(const std::string& url, int timeout_ms);

// Series -> value from a text-format 0.0.4 page. Keys are the canonical series_key() spelling:
// `name{label="value",...}` with labels sorted by name (including "le" for buckets), or plain
// `name`. Comments and blank lines are skipped; timestamps are dropped. Throws std::runtime_error
// with the line number on malformed input.
using ParsedMetrics = std::map<std::string, double>;
ParsedMetrics parse_text_format(const std::string& text);

// The value of the first series (in key order) named exactly `metric_name`, whatever its labels;
// nullopt if none. Handy when a page holds one series per name, like a single trainer rank.
std::optional<double> first_value(const ParsedMetrics& metrics, const std::string& metric_name);

}  // namespace kubetune::metrics
