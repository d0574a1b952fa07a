#pragma once
// The labelSelector query parameter, with the apiserver's syntax:
//   a=b, a==b, a!=b, a, !a, a in (x,y), a notin (x,y)   (comma = AND)
// (No fieldSelector: the operator selects by label only; the real API server's end-to-end tests
// cover the rest.)
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

}  // namespace kubetune::kubefake
