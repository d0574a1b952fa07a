#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "common/metrics/labels.h"
#include "common/metrics/names.h"
#include "common/metrics/sample_writer.h"
#include "common/metrics/text_format.h"

namespace kubetune::metrics {

// What a Registry needs from a family regardless of its metric kind.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  // Appends "# HELP", "# TYPE" and one sample block per child; nothing when there are no children.
  virtual void serialize(std::string& out) const = 0;
};

// All series of one metric name, one child metric per distinct label set. Create families through
// Registry; with() hands out references that stay valid until remove() of that label set (children
// live behind unique_ptr, so adding other children never moves them). Cache the reference in hot
// loops: with() takes a lock and a map lookup.
template <class M>
class Family : public FamilyBase {
 public:
  using Factory = std::function<std::unique_ptr<M>()>;

  // `reserved` holds label names the metric kind writes itself ("le" for histograms).
  Family(std::string name, std::string help, Labels constant_labels, Factory make,
         std::set<std::string> reserved = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        constant_labels_(std::move(constant_labels)),
        make_(std::move(make)),
        reserved_(std::move(reserved)) {}

  M& with(const Labels& labels = {}) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = children_.find(labels);
    if (it == children_.end()) {
      check_labels(labels);  // only on first use: the hot path is a lookup
      it = children_.emplace(labels, make_()).first;
    }
    return *it->second;
  }

  // Drops the series (e.g. a finished job). References obtained from with() for it dangle.
  void remove(const Labels& labels) {
    std::lock_guard<std::mutex> lock(mutex_);
    children_.erase(labels);
  }

  void serialize(std::string& out) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (children_.empty()) return;
    out += "# HELP " + name_ + " " + escape_help(help_) + "\n";
    out += "# TYPE " + name_ + " " + std::string(type_name(MetricTraits<M>::kType)) + "\n";
    for (const auto& [labels, metric] : children_) {
      Labels all = constant_labels_;
      all.insert(labels.begin(), labels.end());
      write_samples(out, name_, all, *metric);
    }
  }

  const std::string& name() const { return name_; }

 private:
  void check_labels(const Labels& labels) const {
    for (const auto& [key, value] : labels) {
      check_label_name(key);
      if (reserved_.count(key) != 0) {
        throw std::invalid_argument("metric \"" + name_ + "\": label name \"" + key +
                                    "\" is reserved for this metric type");
      }
      if (constant_labels_.count(key) != 0) {
        throw std::invalid_argument("metric \"" + name_ + "\": label \"" + key +
                                    "\" is already a constant label of the family");
      }
      check_utf8(value, "metric \"" + name_ + "\": value of label \"" + key + "\"");
    }
  }

  const std::string name_;
  const std::string help_;
  const Labels constant_labels_;
  const Factory make_;
  const std::set<std::string> reserved_;
  mutable std::mutex mutex_;
  std::map<Labels, std::unique_ptr<M>> children_;
};

}  // namespace kubetune::metrics
