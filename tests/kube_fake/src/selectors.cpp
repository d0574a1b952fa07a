#include "selectors.h"

#include <algorithm>
#include <set>

#include "api_error.h"

namespace kubetune::kubefake {
namespace {

std::string trim(const std::string& s) {
  size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  size_t end = s.find_last_not_of(" \t");
  return s.substr(begin, end - begin + 1);
}

// Splits on commas that are not inside "( ... )", since set values are comma separated too.
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(trim(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!trim(current).empty() || !parts.empty()) parts.push_back(trim(current));
  return parts;
}

std::vector<std::string> parse_value_set(const std::string& text, const std::string& whole) {
  std::string inner = trim(text);
  if (inner.size() < 2 || inner.front() != '(' || inner.back() != ')') {
    throw bad_request("unable to parse requirement: expected a (value,...) set in \"" + whole +
                      "\"");
  }
  std::vector<std::string> values;
  for (const std::string& v : split_top_level(inner.substr(1, inner.size() - 2))) {
    values.push_back(trim(v));
  }
  return values;
}

// Finds " in " / " notin " as whole words; returns npos when absent.
size_t find_word(const std::string& text, const std::string& word) {
  size_t pos = text.find(" " + word + " ");
  if (pos == std::string::npos) pos = text.find(" " + word + "(");
  return pos;
}

std::string label_value(const nlohmann::json& object, const std::string& key, bool* present) {
  const nlohmann::json* labels = nullptr;
  if (object.contains("metadata") && object["metadata"].contains("labels")) {
    labels = &object["metadata"]["labels"];
  }
  *present = labels && labels->is_object() && labels->contains(key);
  if (!*present) return "";
  const nlohmann::json& value = (*labels)[key];
  return value.is_string() ? value.get<std::string>() : value.dump();
}

}  // namespace

LabelSelector LabelSelector::parse(const std::string& text) {
  LabelSelector selector;
  if (trim(text).empty()) return selector;
  for (const std::string& part : split_top_level(text)) {
    if (part.empty())
      throw bad_request("unable to parse requirement: empty term in \"" + text + "\"");
    Requirement req;
    size_t pos;
    if ((pos = find_word(part, "notin")) != std::string::npos) {
      req = {trim(part.substr(0, pos)), Op::kNotIn, parse_value_set(part.substr(pos + 6), text)};
    } else if ((pos = find_word(part, "in")) != std::string::npos) {
      req = {trim(part.substr(0, pos)), Op::kIn, parse_value_set(part.substr(pos + 3), text)};
    } else if ((pos = part.find("!=")) != std::string::npos) {
      req = {trim(part.substr(0, pos)), Op::kNotEquals, {trim(part.substr(pos + 2))}};
    } else if ((pos = part.find("==")) != std::string::npos) {
      req = {trim(part.substr(0, pos)), Op::kEquals, {trim(part.substr(pos + 2))}};
    } else if ((pos = part.find('=')) != std::string::npos) {
      req = {trim(part.substr(0, pos)), Op::kEquals, {trim(part.substr(pos + 1))}};
    } else if (part[0] == '!') {
      req = {trim(part.substr(1)), Op::kNotExists, {}};
    } else {
      req = {part, Op::kExists, {}};
    }
    if (req.key.empty() || req.key.find_first_of(" ()!=") != std::string::npos) {
      throw bad_request("unable to parse requirement: invalid label key in \"" + text + "\"");
    }
    selector.requirements_.push_back(req);
  }
  return selector;
}

bool LabelSelector::matches(const nlohmann::json& object) const {
  for (const Requirement& req : requirements_) {
    bool present = false;
    std::string value = label_value(object, req.key, &present);
    bool in_set = std::find(req.values.begin(), req.values.end(), value) != req.values.end();
    bool ok = false;
    switch (req.op) {
      case Op::kEquals:
      case Op::kIn:
        ok = present && in_set;
        break;
      case Op::kNotEquals:  // a missing label is "not equal", as in the apiserver
      case Op::kNotIn:
        ok = !present || !in_set;
        break;
      case Op::kExists:
        ok = present;
        break;
      case Op::kNotExists:
        ok = !present;
        break;
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace kubetune::kubefake
