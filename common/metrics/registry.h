#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/metrics/counter.h"
#include "common/metrics/family.h"
#include "common/metrics/gauge.h"
#include "common/metrics/histogram.h"
#include "common/metrics/labels.h"
#include "common/metrics/metric_type.h"

namespace kubetune::metrics {

// Owns metric families and renders them in the Prometheus text format 0.0.4. Thread-safe: the
// training thread may update and register while the HTTP thread serializes.
//
// Registering a name again with the same kind, help, constant labels (and buckets) returns the
// existing family, so independent components can declare the metrics they use. Anything else that
// clashes throws std::invalid_argument naming the metric, including sample-name clashes such as a
// gauge "x_count" next to a histogram "x".
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter>& counter(const std::string& name, const std::string& help,
                           const Labels& constant_labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help,
                       const Labels& constant_labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help,
                               std::vector<double> buckets, const Labels& constant_labels = {});

  // Families in name order, children in label order: the output is stable for equal content.
  std::string serialize() const;

 private:
  struct Entry {
    MetricType type;
    std::string help;
    Labels constant_labels;
    std::vector<double> buckets;  // histograms only
    std::unique_ptr<FamilyBase> family;
  };

  // Returns the existing entry for `name` after checking it matches, or nullptr if there is none.
  Entry* find_matching(const std::string& name, MetricType type, const std::string& help,
                       const Labels& constant_labels, const std::vector<double>& buckets);
  Entry& add(const std::string& name, Entry entry);
  static void check_definition(const std::string& name, const std::string& help,
                               const Labels& constant_labels);

  mutable std::mutex mutex_;
  std::map<std::string, Entry> families_;
  std::map<std::string, std::string> sample_names_;  // every sample name -> its family
};

}  // namespace kubetune::metrics
