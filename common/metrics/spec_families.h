// prometheus-cpp families registered from their entry in a series table (trainer_series.h,
// operator_series.h): name, help and type come from the contract that the dashboard, the alert
// rules and the operator read, so an exporter cannot drift from it.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <stdexcept>
#include <string>
#include <string_view>

#include "common/metrics/series_spec.h"

namespace kubetune::metrics {

// The spec named `name` in `table`, checked to be of `type`; std::logic_error otherwise (a
// programming error: the exporter uses a name the contract does not list).
template <class Table>
const SeriesSpec& spec_of(const Table& table, std::string_view name, MetricType type) {
  const SeriesSpec* spec = find_spec(table, name);
  if (spec == nullptr) {
    throw std::logic_error("metric " + std::string(name) + " is not in its series table");
  }
  if (spec->type != type) {
    throw std::logic_error("metric " + std::string(name) + " is a " +
                           std::string(type_name(spec->type)) + " in its series table");
  }
  return *spec;
}

// Registers (or finds) the family of spec `name` with `builder` (prometheus::BuildCounter() ...).
template <class Builder, class Table>
auto& spec_family(Builder builder, prometheus::Registry& registry, const Table& table,
                  std::string_view name, MetricType type) {
  const SeriesSpec& spec = spec_of(table, name, type);
  return builder.Name(std::string(spec.name)).Help(std::string(spec.help)).Register(registry);
}

template <class Table>
prometheus::Family<prometheus::Counter>& counter_family(prometheus::Registry& registry,
                                                        const Table& table, std::string_view name) {
  return spec_family(prometheus::BuildCounter(), registry, table, name, MetricType::kCounter);
}

template <class Table>
prometheus::Family<prometheus::Gauge>& gauge_family(prometheus::Registry& registry,
                                                    const Table& table, std::string_view name) {
  return spec_family(prometheus::BuildGauge(), registry, table, name, MetricType::kGauge);
}

template <class Table>
prometheus::Family<prometheus::Histogram>& histogram_family(prometheus::Registry& registry,
                                                            const Table& table,
                                                            std::string_view name) {
  return spec_family(prometheus::BuildHistogram(), registry, table, name, MetricType::kHistogram);
}

// Removes the series with `labels` from `family`, if it has one.
template <class M>
void remove_series(prometheus::Family<M>& family, const prometheus::Labels& labels) {
  if (family.Has(labels)) family.Remove(&family.Add(labels));
}

}  // namespace kubetune::metrics
