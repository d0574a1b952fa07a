#pragma once

#include <string>

#include "common/metrics/counter.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"
#include "common/metrics/labels.h"
#include "common/metrics/metric_type.h"

// How one child metric turns into sample lines of the text format. Family<M> calls these through
// overloading, so it needs no knowledge of the metric kinds.
namespace kubetune::metrics {

template <class M>
struct MetricTraits;
template <>
struct MetricTraits<Counter> {
  static constexpr MetricType kType = MetricType::kCounter;
};
template <>
struct MetricTraits<Gauge> {
  static constexpr MetricType kType = MetricType::kGauge;
};
template <>
struct MetricTraits<Histogram> {
  static constexpr MetricType kType = MetricType::kHistogram;
};

void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Counter& counter);
void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Gauge& gauge);
// name_bucket{...,le="..."} for every bound and +Inf, then name_sum and name_count.
void write_samples(std::string& out, const std::string& name, const Labels& labels,
                   const Histogram& histogram);

}  // namespace kubetune::metrics
