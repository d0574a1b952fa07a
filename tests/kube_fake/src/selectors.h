#pragma once
// labelSelector and fieldSelector query parameters, with the apiserver's syntax:
//   labels: a=b, a==b, a!=b, a, !a, a in (x,y), a notin (x,y)   (comma = AND)
//   fields: f=v, f==v, f!=v on the field labels the resource supports (others: 400)
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "resource_registry.h"

namespace kubetune::kubefake {

class LabelSelector {
 public:
  LabelSelector() = default;  // matches everything
  // Throws ApiError 400 on a malformed selector.
  static LabelSelector parse(const std::string& text);
  bool matches(const nlohmann::json& object) const;

 private:
  enum class Op { kEquals, kNotEquals, kExists, kNotExists, kIn, kNotIn };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  std::vector<Requirement> requirements_;
};

class FieldSelector {
 public:
  FieldSelector() = default;  // matches everything
  // Throws ApiError 400 on a malformed selector or a field the resource does not index.
  static FieldSelector parse(const std::string& text, const Resource& resource);
  bool matches(const nlohmann::json& object) const;

 private:
  struct Requirement {
    std::string field;  // dotted path, e.g. metadata.name
    bool equals;
    std::string value;
  };
  std::vector<Requirement> requirements_;
};

}  // namespace kubetune::kubefake
