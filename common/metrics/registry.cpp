#include "common/metrics/registry.h"

#include <stdexcept>

namespace kubetune::metrics {
namespace {

std::vector<std::string> sample_names_of(const std::string& name, MetricType type) {
  if (type == MetricType::kHistogram) {
    return {name, name + "_bucket", name + "_sum", name + "_count"};
  }
  return {name};
}

std::string clash(const std::string& name, const std::string& what) {
  return "metric \"" + name + "\" is already registered with a different " + what;
}

}  // namespace

void Registry::check_definition(const std::string& name, const std::string& help,
                                const Labels& constant_labels) {
  check_metric_name(name);
  check_utf8(help, "metric \"" + name + "\": help text");
  for (const auto& [key, value] : constant_labels) {
    check_label_name(key);
    check_utf8(value, "metric \"" + name + "\": value of constant label \"" + key + "\"");
  }
}

Registry::Entry* Registry::find_matching(const std::string& name, MetricType type,
                                         const std::string& help, const Labels& constant_labels,
                                         const std::vector<double>& buckets) {
  auto it = families_.find(name);
  if (it == families_.end()) return nullptr;
  Entry& entry = it->second;
  if (entry.type != type) {
    throw std::invalid_argument(clash(name, "type (" + std::string(type_name(entry.type)) + ")"));
  }
  if (entry.help != help) throw std::invalid_argument(clash(name, "help text"));
  if (entry.constant_labels != constant_labels) {
    throw std::invalid_argument(clash(name, "set of constant labels"));
  }
  if (entry.buckets != buckets) throw std::invalid_argument(clash(name, "bucket layout"));
  return &entry;
}

Registry::Entry& Registry::add(const std::string& name, Entry entry) {
  const auto samples = sample_names_of(name, entry.type);
  for (const auto& sample : samples) {
    auto owner = sample_names_.find(sample);
    if (owner != sample_names_.end()) {
      throw std::invalid_argument("metric \"" + name + "\": sample name \"" + sample +
                                  "\" is already produced by metric \"" + owner->second + "\"");
    }
  }
  for (const auto& sample : samples) sample_names_[sample] = name;
  return families_.emplace(name, std::move(entry)).first->second;
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help,
                                   const Labels& constant_labels) {
  check_definition(name, help, constant_labels);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* entry = find_matching(name, MetricType::kCounter, help, constant_labels, {});
  if (entry == nullptr) {
    auto family = std::make_unique<Family<Counter>>(name, help, constant_labels,
                                                    [] { return std::make_unique<Counter>(); });
    entry = &add(name, Entry{MetricType::kCounter, help, constant_labels, {}, std::move(family)});
  }
  return static_cast<Family<Counter>&>(*entry->family);
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help,
                               const Labels& constant_labels) {
  check_definition(name, help, constant_labels);
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* entry = find_matching(name, MetricType::kGauge, help, constant_labels, {});
  if (entry == nullptr) {
    auto family = std::make_unique<Family<Gauge>>(name, help, constant_labels,
                                                  [] { return std::make_unique<Gauge>(); });
    entry = &add(name, Entry{MetricType::kGauge, help, constant_labels, {}, std::move(family)});
  }
  return static_cast<Family<Gauge>&>(*entry->family);
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       std::vector<double> buckets, const Labels& constant_labels) {
  check_definition(name, help, constant_labels);
  if (constant_labels.count("le") != 0) {
    throw std::invalid_argument("metric \"" + name + "\": \"le\" is reserved in histograms");
  }
  try {
    buckets = Histogram::checked_bounds(std::move(buckets));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("metric \"" + name + "\": " + e.what());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Entry* entry = find_matching(name, MetricType::kHistogram, help, constant_labels, buckets);
  if (entry == nullptr) {
    auto family = std::make_unique<Family<Histogram>>(
        name, help, constant_labels, [buckets] { return std::make_unique<Histogram>(buckets); },
        std::set<std::string>{"le"});
    entry = &add(name,
                 Entry{MetricType::kHistogram, help, constant_labels, buckets, std::move(family)});
  }
  return static_cast<Family<Histogram>&>(*entry->family);
}

std::string Registry::serialize() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [name, entry] : families_) entry.family->serialize(out);
  return out;
}

}  // namespace kubetune::metrics
