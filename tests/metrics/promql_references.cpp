#include "promql_references.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include "common/metrics/operator_series.h"
#include "common/metrics/trainer_series.h"

namespace kubetune::metrics::testing {
namespace {

bool is_ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool is_ident_char(char c) {
  return is_ident_start(c) || std::isdigit(static_cast<unsigned char>(c));
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Keywords followed by a parenthesised list of label names.
const std::set<std::string> kLabelListKeywords = {"by",       "without",    "on",
                                                  "ignoring", "group_left", "group_right"};
// Words that are never metric names. Aggregations are here because "sum by (x) (...)" puts
// "by" and not "(" right after the operator.
const std::set<std::string> kOtherKeywords = {
    "and",          "or",      "unless", "bool",     "offset", "atan2",      "inf",    "nan",
    "sum",          "min",     "max",    "avg",      "group",  "stddev",     "stdvar", "count",
    "count_values", "bottomk", "topk",   "quantile", "limitk", "limit_ratio"};

// Index just past the closing quote of the string starting at `i`.
std::size_t skip_string(const std::string& s, std::size_t i) {
  const char quote = s[i++];
  while (i < s.size() && s[i] != quote) i += (s[i] == '\\' && quote != '`') ? 2 : 1;
  return std::min(i + 1, s.size());
}

// Index just past the bracket that closes the one at `i`, skipping strings inside.
std::size_t skip_balanced(const std::string& s, std::size_t i) {
  const char open = s[i];
  const char close = open == '(' ? ')' : open == '[' ? ']' : '}';
  int depth = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = skip_string(s, i);
      continue;
    }
    if (c == open) ++depth;
    if (c == close && --depth == 0) return i + 1;
    ++i;
  }
  return i;
}

std::size_t skip_spaces(const std::string& s, std::size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// Label names of the matchers in the {...} block starting at `i` (the brace itself).
std::set<std::string> matcher_labels(const std::string& s, std::size_t i, std::size_t end) {
  std::set<std::string> labels;
  ++i;
  while (i < end) {
    if (s[i] == '"' || s[i] == '\'' || s[i] == '`') {
      i = skip_string(s, i);
    } else if (is_ident_start(s[i])) {
      const std::size_t start = i;
      while (i < end && is_ident_char(s[i])) ++i;
      labels.insert(s.substr(start, i - start));
    } else {
      ++i;
    }
  }
  return labels;
}

const SeriesSpec* find_any(std::string_view name) {
  if (const SeriesSpec* spec = find_spec(trainer_series::kAll, name)) return spec;
  return find_spec(operator_series::kAll, name);
}

// The spec for a sample name, resolving histogram suffixes; `is_bucket` tells whether "le" applies.
const SeriesSpec* resolve(const std::string& name, bool& is_bucket) {
  is_bucket = false;
  if (const SeriesSpec* spec = find_any(name)) return spec;
  for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const SeriesSpec* base = find_any(name.substr(0, name.size() - suffix.size()));
    if (base != nullptr && base->type == MetricType::kHistogram) {
      is_bucket = suffix == "_bucket";
      return base;
    }
  }
  return nullptr;
}

}  // namespace

std::vector<MetricReference> referenced_metrics(const std::string& s) {
  std::vector<MetricReference> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' || c == '\'' || c == '`') {
      i = skip_string(s, i);
    } else if (c == '[') {  // range or subquery: durations and $__rate_interval
      i = skip_balanced(s, i);
    } else if (c == '{') {  // selector without a name, e.g. {__name__=~"..."}: not supported
      i = skip_balanced(s, i);
    } else if (c == '#') {  // comment to end of line
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (c == '$') {  // Grafana variable: $name or ${name}
      ++i;
      if (i < s.size() && s[i] == '{') {
        i = skip_balanced(s, i);
      } else {
        while (i < s.size() && is_ident_char(s[i])) ++i;
      }
    } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {  // 0.5, 1e3, 10m, 0x1f
      while (i < s.size() && (is_ident_char(s[i]) || s[i] == '.')) ++i;
    } else if (is_ident_start(c)) {
      const std::size_t start = i;
      while (i < s.size() && is_ident_char(s[i])) ++i;
      const std::string word = s.substr(start, i - start);
      const std::size_t next = skip_spaces(s, i);
      const bool call_follows = next < s.size() && s[next] == '(';
      if (kLabelListKeywords.count(lower(word)) != 0) {
        if (call_follows) i = skip_balanced(s, next);
      } else if (kOtherKeywords.count(lower(word)) != 0 || call_follows) {
        // operator, aggregation or function name
      } else {
        MetricReference ref{word, {}};
        if (next < s.size() && s[next] == '{') {
          const std::size_t end = skip_balanced(s, next);
          ref.matcher_labels = matcher_labels(s, next, end);
          i = end;
        }
        out.push_back(std::move(ref));
      }
    } else {
      ++i;
    }
  }
  return out;
}

std::string grafana_query_expression(const std::string& query) {
  static const std::regex kLabelValues(
      R"(^\s*label_values\s*\(\s*([\s\S]*),\s*[a-zA-Z_]\w*\s*\)\s*$)");
  std::smatch match;
  if (std::regex_match(query, match, kLabelValues)) return match[1].str();
  return query;
}

std::vector<std::string> check_expression(const std::string& promql, const std::string& where) {
  static const std::set<std::string> kTargetLabels = {"namespace", "pod", "instance", "__name__"};
  std::vector<std::string> problems;
  for (const MetricReference& ref : referenced_metrics(promql)) {
    bool is_bucket = false;
    const SeriesSpec* spec = resolve(ref.name, is_bucket);
    if (spec == nullptr) {
      problems.push_back(where + ": unknown metric \"" + ref.name + "\" in: " + promql);
      continue;
    }
    const std::vector<std::string> names = label_names(*spec);
    for (const std::string& label : ref.matcher_labels) {
      const bool known = std::find(names.begin(), names.end(), label) != names.end() ||
                         kTargetLabels.count(label) != 0 || (is_bucket && label == "le");
      if (!known) {
        problems.push_back(where + ": metric \"" + ref.name + "\" has no label \"" + label +
                           "\" in: " + promql);
      }
    }
  }
  return problems;
}

}  // namespace kubetune::metrics::testing
