#include "example_series.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "common/metrics/operator_series.h"
#include "common/metrics/spec_families.h"
#include "common/metrics/trainer_series.h"

namespace kubetune::metrics::testing {
namespace {

prometheus::Histogram::BucketBoundaries buckets_for(const SeriesSpec& spec) {
  if (spec.name == trainer_series::kStepSeconds) {
    return {trainer_series::kStepSecondsBuckets.begin(), trainer_series::kStepSecondsBuckets.end()};
  }
  if (spec.name == operator_series::kReconcileDurationSeconds) {
    return {operator_series::kReconcileDurationBuckets.begin(),
            operator_series::kReconcileDurationBuckets.end()};
  }
  throw std::logic_error("no buckets known for histogram " + std::string(spec.name));
}

// Every value a multi-valued label takes in the example data.
std::vector<std::string> values_of(const SeriesSpec& spec, const std::string& label) {
  if (label == "phase" && spec.name == operator_series::kJobs) {
    return {operator_series::kJobPhases.begin(), operator_series::kJobPhases.end()};
  }
  if (label == "phase")
    return {trainer_series::kStepPhases.begin(), trainer_series::kStepPhases.end()};
  if (label == "result") {
    return {operator_series::kReconcileResults.begin(), operator_series::kReconcileResults.end()};
  }
  if (label == "expert") return {"0", "1", "2", "3"};            // a mixture of four experts
  if (label == "verb") return {"GET", "POST", "PUT", "DELETE"};  // the operator's API requests
  if (label == "code") return {"200", "201", "409"};
  if (label == "answer")
    return {trainer_series::kPreferenceAnswers.begin(), trainer_series::kPreferenceAnswers.end()};
  return {};
}

// Registers the spec's family (from whichever table lists it) and sets one series of it.
template <class Table>
void fill(prometheus::Registry& registry, const Table& table, const SeriesSpec& spec,
          const Labels& labels, double value) {
  switch (spec.type) {
    case MetricType::kCounter:
      counter_family(registry, table, spec.name).Add(labels).Increment(value);
      break;
    case MetricType::kGauge:
      gauge_family(registry, table, spec.name).Add(labels).Set(value);
      break;
    case MetricType::kHistogram: {
      auto& histogram = histogram_family(registry, table, spec.name).Add(labels, buckets_for(spec));
      for (double v : {0.02 * value, 0.7 * value, 3.0 * value}) histogram.Observe(v);
      break;
    }
  }
}

}  // namespace

Labels example_labels(const SeriesSpec& spec, const std::string& job, int rank) {
  Labels labels;
  for (const std::string& label : label_names(spec)) {
    if (label == "job") {
      labels[label] = job;
    } else if (label == "namespace") {
      labels[label] = "ml";
    } else if (label == "rank" || label == "local_rank") {
      labels[label] = std::to_string(rank);
    } else if (label == "device") {
      labels[label] = "cuda:" + std::to_string(rank);
    } else if (auto values = values_of(spec, label); !values.empty()) {
      labels[label] = values.front();
    } else {
      throw std::logic_error("no example value for label " + label + " of " +
                             std::string(spec.name));
    }
  }
  return labels;
}

void populate_all_series(prometheus::Registry& registry, const std::string& job) {
  auto populate = [&](const auto& table, const SeriesSpec& spec) {
    const auto names = label_names(spec);
    const bool per_rank = std::find(names.begin(), names.end(), "rank") != names.end();
    for (int rank = 0; rank < (per_rank ? 2 : 1); ++rank) {
      Labels labels = example_labels(spec, job, rank);
      // One series per value of the multi-valued label (phase/result), if the spec has one.
      std::string multi;
      for (const auto& label : names) {
        if (!values_of(spec, label).empty()) multi = label;
      }
      const auto values = multi.empty() ? std::vector<std::string>{""} : values_of(spec, multi);
      for (std::size_t k = 0; k < values.size(); ++k) {
        if (!multi.empty()) labels[multi] = values[k];
        fill(registry, table, spec, labels, 1.5 + rank + static_cast<double>(k));
      }
    }
  };
  for (const auto& spec : trainer_series::kAll) populate(trainer_series::kAll, spec);
  for (const auto& spec : operator_series::kAll) populate(operator_series::kAll, spec);
}

}  // namespace kubetune::metrics::testing
