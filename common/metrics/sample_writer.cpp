#include "common/metrics/sample_writer.h"

#include <limits>

#include "common/metrics/text_format.h"

namespace kubetune::metrics {
namespace {

void write_line(std::string& out, const std::string& name, const Labels& labels, double value) {
  out += series_key(name, labels);
  out += ' ';
  out += format_value(value);
  out += '\n';
}

// Like series_key() but with "le" last, where every client library and the docs put it.
void write_bucket(std::string& out, const std::string& name, const Labels& labels, double bound,
                  double cumulative_count) {
  std::string key = series_key(name + "_bucket", labels);
  const std::string le = "le=\"" + format_value(bound) + "\"";
  if (labels.empty()) {
    key += "{" + le + "}";
  } else {
    key.insert(key.size() - 1, "," + le);
  }
  out += key;
  out += ' ';
  out += format_value(cumulative_count);
  out += '\n';
}

}  // namespace

void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Counter& counter) {
  write_line(out, name, labels, counter.value());
}

void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Gauge& gauge) {
  write_line(out, name, labels, gauge.value());
}

void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Histogram& histogram) {
  const Histogram::Snapshot snap = histogram.snapshot();
  for (std::size_t i = 0; i < snap.upper_bounds.size(); ++i) {
    write_bucket(out, name, labels, snap.upper_bounds[i], static_cast<double>(snap.cumulative[i]));
  }
  write_bucket(out, name, labels, std::numeric_limits<double>::infinity(),
               static_cast<double>(snap.cumulative.back()));
  write_line(out, name + "_sum", labels, snap.sum);
  write_line(out, name + "_count", labels, static_cast<double>(snap.count));
}

}  // namespace kubetune::metrics
