#pragma once

#include <string_view>

namespace kubetune::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

// The word used on the "# TYPE" line.
constexpr std::string_view type_name(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace kubetune::metrics
