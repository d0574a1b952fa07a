#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/sandbox.h"
#include "text/utf8.h"

namespace kubetune::text::jinja {
namespace {

// Numeric view used for Python's cross-type comparisons (True == 1 == 1.0).
std::optional<double> as_number(const Json& j) {
  if (j.is_boolean()) return j.get<bool>() ? 1.0 : 0.0;
  if (j.is_number()) return j.get<double>();
  return std::nullopt;
}

bool json_equals(const Json& a, const Json& b) {
  const auto na = as_number(a), nb = as_number(b);
  if (na && nb) {
    if (a.is_number_integer() && b.is_number_integer()) return a.get<int64_t>() == b.get<int64_t>();
    return *na == *nb;
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    sandbox::charge_items(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      if (!json_equals(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    sandbox::charge_items(a.size());
    for (auto it = a.begin(); it != a.end(); ++it) {
      const auto other = b.find(it.key());
      if (other == b.end() || !json_equals(it.value(), *other)) return false;
    }
    return true;
  }
  if (a.is_string()) {
    const auto &x = a.get_ref<const std::string&>(), &y = b.get_ref<const std::string&>();
    if (x.size() != y.size()) return false;
    sandbox::charge_bytes(x.size());
    return x == y;
  }
  return a == b;
}

size_t mix(size_t seed, size_t h) {
  return seed ^ (h + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

size_t json_hash(const Json& j) {
  if (const auto n = as_number(j)) {
    const double d = *n == 0.0 ? 0.0 : *n;  // -0.0 == 0.0
    return std::isnan(d) ? 0x7ff8 : std::hash<double>()(d);
  }
  if (j.is_string()) {
    sandbox::charge_bytes(j.get_ref<const std::string&>().size());
    return std::hash<std::string>()(j.get_ref<const std::string&>());
  }
  if (j.is_array()) {
    sandbox::charge_items(j.size());
    size_t h = 0xa77a;
    for (const auto& e : j) h = mix(h, json_hash(e));
    return h;
  }
  if (j.is_object()) {  // equal dicts may list their keys in another order
    sandbox::charge_items(j.size());
    size_t h = 0xd1c7;
    for (auto it = j.begin(); it != j.end(); ++it)
      h += mix(std::hash<std::string>()(it.key()), json_hash(it.value()));
    return h;
  }
  return 0x4e0e;  // null
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        ++i;
        continue;
      case '\\':
        out += "\\\\";
        ++i;
        continue;
      case '\n':
        out += "\\n";
        ++i;
        continue;
      case '\r':
        out += "\\r";
        ++i;
        continue;
      case '\t':
        out += "\\t";
        ++i;
        continue;
      case '\b':
        out += "\\b";
        ++i;
        continue;
      case '\f':
        out += "\\f";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
      ++i;
    } else if (c >= 0x80 && ensure_ascii) {
      const char32_t cp = utf8::decode(s, i);
      char buf[16];
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
      ++i;
    }
  }
  out.push_back('"');
}

void dump(std::string& out, const Json& j, const JsonDumpOptions& o, int level) {
  const auto newline = [&](int lvl) {
    // Indentation grows with depth times width: the one place the output can outgrow the input.
    sandbox::check_string_bytes(out.size() + static_cast<size_t>(lvl) * o.indent->size());
    out.push_back('\n');
    for (int k = 0; k < lvl; ++k) out += *o.indent;
  };
  if (j.is_null()) {
    out += "null";
  } else if (j.is_boolean()) {
    out += j.get<bool>() ? "true" : "false";
  } else if (j.is_number_integer()) {
    out += j.dump();
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float(d);
  } else if (j.is_string()) {
    append_json_string(out, j.get_ref<const std::string&>(), o.ensure_ascii);
  } else if (j.is_array() || j.is_object()) {
    const bool is_array = j.is_array();
    if (j.empty()) {
      out += is_array ? "[]" : "{}";
      return;
    }
    out.push_back(is_array ? '[' : '{');
    std::vector<std::pair<std::string, const Json*>> items;
    if (is_array) {
      for (const auto& e : j) items.emplace_back("", &e);
    } else {
      for (auto it = j.begin(); it != j.end(); ++it) items.emplace_back(it.key(), &it.value());
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto& a, auto& b) { return a.first < b.first; });
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += o.item_separator;
      if (o.indent) newline(level + 1);
      if (!is_array) {
        append_json_string(out, items[i].first, o.ensure_ascii);
        out += o.key_separator;
      }
      dump(out, *items[i].second, o, level + 1);
    }
    if (o.indent) newline(level);
    out.push_back(is_array ? ']' : '}');
  }
}

}  // namespace

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::Namespace:
    case Value::Kind::Callable:
      return true;
    case Value::Kind::Data:
      break;
  }
  const Json& j = v.json();
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0.0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();
}

std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest decimal that round-trips, like Python's repr.
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  // buf is "d.ddde[+-]XX": rebuild it the way Python's float_repr_style 'r' does.
  std::string s(buf);
  const auto e = s.find('e');
  std::string mantissa = s.substr(0, e);
  const int exponent = std::atoi(s.c_str() + e + 1);
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
            digits.substr(static_cast<size_t>(exponent) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return negative ? "-" + out : out;
}

std::string py_repr(const Json& j) {
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return j.dump();
  if (j.is_number_float()) return py_float(j.get<double>());
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    const char quote =
        (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    std::string out(1, quote);
    for (char c : s) {
      if (c == quote || c == '\\') {
        out.push_back('\\');
        out.push_back(c);
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
        out += buf;
      } else {
        out.push_back(c);
      }
    }
    out.push_back(quote);
    return out;
  }
  std::string out(1, j.is_array() ? '[' : '{');
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ", ";
    first = false;
    if (j.is_object()) out += py_repr(Json(it.key())) + ": ";
    out += py_repr(it.value());
  }
  out.push_back(j.is_array() ? ']' : '}');
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::Namespace:
      return "<Namespace>";
    case Value::Kind::Callable:
      return "<function " + v.fn()->name + ">";
    case Value::Kind::Data:
      break;
  }
  if (v.is_string()) return v.str();
  if (v.is_tuple() && v.is_list()) {
    std::string out = "(";
    for (size_t i = 0; i < v.json().size(); ++i) out += (i ? ", " : "") + py_repr(v.json()[i]);
    return out + (v.json().size() == 1 ? ",)" : ")");
  }
  return py_repr(v.json());
}

bool equals(const Value& a, const Value& b) {
  if (a.is_data() && b.is_data()) return json_equals(a.json(), b.json());
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
      return true;
    case Value::Kind::Namespace:
      return a.ns() == b.ns();
    case Value::Kind::Callable:
      return a.fn() == b.fn();
    case Value::Kind::Data:
      return false;
  }
  return false;
}

bool equals(const Json& a, const Json& b) { return json_equals(a, b); }

size_t value_hash(const Value& v) {
  if (v.is_data()) return json_hash(v.json());
  if (v.kind() == Value::Kind::Namespace) return std::hash<const void*>()(v.ns().get());
  if (v.kind() == Value::Kind::Callable) return std::hash<const void*>()(v.fn().get());
  return 0x0dd;  // all undefined values are equal
}

bool list_contains(const Json& list, const Value& item) {
  if (!item.is_data()) return false;  // data never equals a non-data value
  size_t looked_at = 0;
  bool found = false;
  for (const auto& e : list) {
    ++looked_at;
    if (json_equals(e, item.json())) {
      found = true;
      break;
    }
  }
  sandbox::charge_items(looked_at);
  return found;
}

std::string json_dumps(const Json& j, const JsonDumpOptions& options) {
  std::string out;
  dump(out, j, options, 0);
  return out;
}

JsonSize json_size(const Json& j) {
  JsonSize size{1, 0, 0};
  std::vector<std::pair<const Json*, int>> pending = {{&j, 1}};  // value, its depth
  while (!pending.empty() && size.nodes <= sandbox::kMaxValueNodes &&
         size.bytes <= sandbox::kMaxValueBytes && size.depth <= sandbox::kMaxValueDepth) {
    const auto [v, depth] = pending.back();
    pending.pop_back();
    size.depth = std::max(size.depth, depth);
    if (v->is_string()) size.bytes += v->get_ref<const std::string&>().size();
    if (!v->is_structured()) continue;
    size.nodes += v->size();
    if (size.nodes > sandbox::kMaxValueNodes) break;
    for (auto it = v->begin(); it != v->end(); ++it) {
      if (v->is_object()) size.bytes += it.key().size();
      pending.emplace_back(&it.value(), depth + 1);
    }
  }
  return size;
}

void check_sandbox_size(const JsonSize& size) {
  const auto too_big = [](const std::string& what) {
    throw std::runtime_error("value " + what + " (template sandbox limit)");
  };
  if (size.nodes > sandbox::kMaxValueNodes)
    too_big("with more than " + std::to_string(sandbox::kMaxValueNodes) + " items");
  if (size.bytes > sandbox::kMaxValueBytes)
    too_big("holding more than " + std::to_string(sandbox::kMaxValueBytes) + " bytes of text");
  if (size.depth > sandbox::kMaxValueDepth)
    too_big("nested deeper than " + std::to_string(sandbox::kMaxValueDepth) + " levels");
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "undefined";
    case Value::Kind::Namespace:
      return "namespace";
    case Value::Kind::Callable:
      return "function";
    case Value::Kind::Data:
      break;
  }
  const Json& j = v.json();
  if (j.is_null()) return "none";
  if (j.is_boolean()) return "bool";
  if (j.is_number_integer()) return "int";
  if (j.is_number()) return "float";
  if (j.is_string()) return "string";
  if (j.is_array()) return "list";
  return "dict";
}

}  // namespace kubetune::text::jinja
