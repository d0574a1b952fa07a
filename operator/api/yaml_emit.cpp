#include "operator/api/yaml_emit.h"

#include <regex>
#include <sstream>

namespace kubetune::op {
namespace {

using nlohmann::json;

// A plain (unquoted) scalar is only used when it cannot be read back as anything but this string.
bool is_safe_plain(const std::string& s) {
  static const std::regex plain(R"(^[A-Za-z_/][A-Za-z0-9_ ./()+-]*$)");
  static const std::regex reserved(R"(^(true|false|yes|no|on|off|null|y|n|~)$)", std::regex::icase);
  if (s.empty() || s.back() == ' ' || !std::regex_match(s, plain)) return false;
  if (std::regex_match(s, reserved)) return false;
  return s.find(" #") == std::string::npos && s.find(": ") == std::string::npos;
}

std::string scalar(const json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    return is_safe_plain(s) ? s : json(s).dump();  // JSON strings are valid YAML double-quoted
  }
  std::string text = v.dump();  // numbers, booleans, null: JSON spelling is YAML spelling...
  // ...except that YAML 1.1 readers take "1e-08" for a string; "1.0e-08" is a float everywhere.
  if (v.is_number_float() && text.find('.') == std::string::npos) {
    const auto e = text.find_first_of("eE");
    text = e == std::string::npos ? text + ".0" : text.insert(e, ".0");
  }
  return text;
}

bool is_empty_collection(const json& v) { return (v.is_object() || v.is_array()) && v.empty(); }

void emit(const json& v, int indent, std::ostringstream& out);

void emit_object(const json& v, int indent, std::ostringstream& out) {
  const std::string pad(indent, ' ');
  for (auto it = v.begin(); it != v.end(); ++it) {
    out << pad << scalar(json(it.key())) << ":";
    const json& child = it.value();
    if (child.is_object() && !child.empty()) {
      out << "\n";
      emit(child, indent + 2, out);
    } else if (child.is_array() && !child.empty()) {
      out << "\n";
      emit(child, indent, out);  // Kubernetes style: list items at the key's indentation
    } else {
      out << " " << (is_empty_collection(child) ? child.dump() : scalar(child)) << "\n";
    }
  }
}

void emit_array(const json& v, int indent, std::ostringstream& out) {
  const std::string pad(indent, ' ');
  for (const auto& item : v) {
    if (item.is_object() && !item.empty()) {
      // The first key goes on the "- " line; the rest line up under it.
      std::ostringstream nested;
      emit_object(item, indent + 2, nested);
      std::string text = nested.str();
      out << pad << "- " << text.substr(indent + 2);
    } else if (item.is_array() && !item.empty()) {
      out << pad << "-\n";
      emit(item, indent + 2, out);
    } else {
      out << pad << "- " << (is_empty_collection(item) ? item.dump() : scalar(item)) << "\n";
    }
  }
}

void emit(const json& v, int indent, std::ostringstream& out) {
  if (v.is_object()) {
    emit_object(v, indent, out);
  } else if (v.is_array()) {
    emit_array(v, indent, out);
  } else {
    out << std::string(indent, ' ') << scalar(v) << "\n";
  }
}

}  // namespace

std::string json_to_yaml(const nlohmann::json& value) {
  if (is_empty_collection(value)) return value.dump() + "\n";
  std::ostringstream out;
  emit(value, 0, out);
  return out.str();
}

}  // namespace kubetune::op
