#include "text/jinja/builtins.h"

#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <set>
#include <stdexcept>
#include <unordered_set>

#include "text/jinja/errors.h"
#include "text/jinja/sandbox.h"
#include "text/utf8.h"

namespace kubetune::text::jinja {
namespace {

[[noreturn]] void type_error(const std::string& what) { throw std::runtime_error(what); }

// ---- argument helpers ----
const Value* arg(const Args& args, const Kwargs& kwargs, size_t index, const char* name) {
  if (index < args.size()) return &args[index];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string arg_str(const Args& args, const Kwargs& kwargs, size_t index, const char* name,
                    const std::string& def, const std::string& who) {
  const Value* v = arg(args, kwargs, index, name);
  if (!v || v->is_none() || v->is_undefined()) return def;
  if (!v->is_string())
    type_error(who + ": argument '" + name + "' must be a string, got " + type_name(*v));
  return v->str();
}

bool arg_bool(const Args& args, const Kwargs& kwargs, size_t index, const char* name, bool def) {
  const Value* v = arg(args, kwargs, index, name);
  return v ? truthy(*v) : def;
}

std::vector<std::string> code_points(const std::string& s) {
  sandbox::charge_bytes(s.size());
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n =
        std::min(utf8::sequence_length(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// Python's str.isspace (Unicode White_Space plus the ASCII information separators).
bool py_space(char32_t cp) { return utf8::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  sandbox::charge_bytes(s.size());
  std::vector<char32_t> cps;
  for (size_t i = 0; i < s.size();) cps.push_back(utf8::decode(s, i));
  std::vector<char32_t> set;
  const bool custom = chars && chars->is_string();
  if (custom) {
    for (size_t i = 0; i < chars->str().size();) set.push_back(utf8::decode(chars->str(), i));
  }
  const auto strip_it = [&](char32_t c) {
    return custom ? std::find(set.begin(), set.end(), c) != set.end() : py_space(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) utf8::append(out, cps[i]);
  return out;
}

std::string icu_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title-first
  sandbox::charge_items(1 + s.size() / 16);             // ICU is slower than a byte-wise scan
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (mode == 0) u.toLower();
  if (mode == 1) u.toUpper();
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string capitalize(const std::string& s) {
  if (s.empty()) return s;
  const auto cps = code_points(s);
  std::string rest;
  for (size_t i = 1; i < cps.size(); ++i) rest += cps[i];
  return icu_case(cps[0], 1) + icu_case(rest, 0);
}

// Jinja's title filter: capitalise every chunk that follows whitespace or one of -({[<.
std::string title(const std::string& s) {
  std::string out, word;
  const auto flush = [&] {
    out += capitalize(word);
    word.clear();
  };
  for (const auto& cp : code_points(s)) {
    size_t i = 0;
    const char32_t c = utf8::decode(cp, i);
    if (py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<') {
      flush();
      out += cp;
    } else {
      word += cp;
    }
  }
  flush();
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    sandbox::charge_bytes(s.size());
    // Runs of whitespace separate; leading/trailing whitespace is ignored.
    std::string cur;
    bool in_word = false;
    size_t i = 0;
    while (i < s.size()) {
      const size_t start = i;
      const char32_t c = utf8::decode(s, i);
      if (py_space(c)) {
        if (in_word) {
          out.push_back(cur);
          cur.clear();
          in_word = false;
        }
        continue;
      }
      if (!in_word && maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        std::string rest = s.substr(start);
        while (!rest.empty()) {
          size_t k = rest.size() - 1;
          while (k > 0 && (static_cast<unsigned char>(rest[k]) & 0xC0) == 0x80) --k;
          size_t tmp = k;
          if (!py_space(utf8::decode(rest, tmp))) break;
          rest.erase(k);
        }
        out.push_back(rest);
        return out;
      }
      in_word = true;
      cur.append(s, start, i - start);
    }
    if (in_word) out.push_back(cur);
    return out;
  }
  if (!sep->is_string()) type_error("split: separator must be a string");
  const std::string& d = sep->str();
  if (d.empty()) type_error("split: empty separator");
  sandbox::charge_search(s.size(), d.size());
  size_t prev = 0, pos;
  while ((maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) &&
         (pos = s.find(d, prev)) != std::string::npos) {
    out.push_back(s.substr(prev, pos - prev));
    prev = pos + d.size();
  }
  out.push_back(s.substr(prev));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const auto cps = code_points(s);
    int64_t n = 0;
    for (const auto& c : cps) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      out += c;
      sandbox::check_string_bytes(out.size());  // `to` around each character multiplies sizes
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  sandbox::charge_search(s.size(), from.size());
  size_t prev = 0, pos;
  int64_t n = 0;
  while ((count < 0 || n < count) && (pos = s.find(from, prev)) != std::string::npos) {
    out.append(s, prev, pos - prev);
    out += to;
    sandbox::check_string_bytes(out.size());
    prev = pos + from.size();
    ++n;
  }
  out.append(s, prev, std::string::npos);
  return out;
}

bool starts_or_ends(const std::string& s, const Value& what, bool start) {
  const auto check = [&](const std::string& p) {
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0
                 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (what.is_string()) return check(what.str());
  if (what.is_list()) {
    for (const auto& p : what.json()) {
      if (p.is_string() && check(p.get<std::string>())) return true;
    }
    return false;
  }
  type_error(std::string(start ? "startswith" : "endswith") + ": expected a string or tuple");
}

}  // namespace

// Python ordering for sort/min/max and comparison operators.
int py_compare(const Value& a, const Value& b, bool case_sensitive) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    const double x = a.is_bool() ? (a.json().get<bool>() ? 1 : 0) : a.as_double();
    const double y = b.is_bool() ? (b.json().get<bool>() ? 1 : 0) : b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    sandbox::charge_bytes(std::min(a.str().size(), b.str().size()));
    const std::string x = case_sensitive ? a.str() : icu_case(a.str(), 0);
    const std::string y = case_sensitive ? b.str() : icu_case(b.str(), 0);
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    sandbox::charge_items(std::min(a.json().size(), b.json().size()));
    for (size_t i = 0; i < a.json().size() && i < b.json().size(); ++i) {
      const int c = py_compare(Value::part_of(a, a.json()[i]), Value::part_of(b, b.json()[i]),
                               case_sensitive);
      if (c != 0) return c;
    }
    return a.json().size() < b.json().size() ? -1 : (a.json().size() > b.json().size() ? 1 : 0);
  }
  type_error("'<' not supported between " + type_name(a) + " and " + type_name(b));
}

namespace {

Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t prev = 0;
  while (true) {
    const size_t dot = path.find('.', prev);
    const std::string part = path.substr(prev, dot - prev);
    const bool numeric = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = numeric ? get_item(v, Value(Json(std::stoll(part)))) : get_attr(v, part);
    if (dot == std::string::npos) return v;
    prev = dot + 1;
  }
}

Json to_json(const Value& v, const std::string& who) {
  if (!v.is_data()) type_error(who + ": cannot convert " + type_name(v) + " to data");
  return v.json();
}

Value list_of(const std::vector<Value>& items, const std::string& who) {
  Json out = Json::array();
  for (const auto& v : items) out.push_back(to_json(v, who));
  return Value(out);
}

// select/reject/selectattr/rejectattr share one implementation.
Value filter_items(const Value& input, const Args& args, bool by_attr, bool keep) {
  const std::string who = std::string(keep ? "select" : "reject") + (by_attr ? "attr" : "");
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (args.empty() || !args[0].is_string()) type_error(who + ": expected an attribute name");
    attr = args[0].str();
    next = 1;
  }
  std::string test;
  if (args.size() > next) {
    if (!args[next].is_string()) type_error(who + ": test name must be a string");
    test = args[next].str();
    if (!is_known_test(test)) type_error(who + ": unsupported test '" + test + "'");
  }
  const Args test_args(args.begin() + static_cast<std::ptrdiff_t>(std::min(args.size(), next + 1)),
                       args.end());
  std::vector<Value> out;
  for (const auto& item : iterate(input)) {
    const Value subject = by_attr ? attribute_path(item, attr) : item;
    const bool pass = test.empty() ? truthy(subject) : apply_test(test, subject, test_args);
    if (pass == keep) out.push_back(item);
  }
  return list_of(out, who);
}

Value number_op_int(const Value& v, const Value* def, const std::string& who) {
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(Json(v.json().get<bool>() ? 1 : 0));
  if (v.is_number()) return Value(Json(static_cast<int64_t>(std::trunc(v.as_double()))));
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = py_strip(v.str(), nullptr, true, true);
      const long long n = std::stoll(s, &used);
      if (used == s.size()) return Value(Json(n));
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(Json(static_cast<int64_t>(std::trunc(d))));
    } catch (const std::exception&) {
    }
  }
  (void)who;
  return def ? *def : Value(Json(0));
}

// ---------------------------------------------------------------------------------------------
// Filters and tests: one function each, found by name in a table (several names may share one:
// length/count, default/d, ...). The function gets the name it was called by.
using Filter = Value (*)(const std::string& name, const Value& input, const Args& args,
                         const Kwargs& kwargs);
using Test = bool (*)(const std::string& name, const Value& input, const Args& args);

std::string filter_who(const std::string& name) { return "filter '" + name + "'"; }
// A filter's input as text; undefined reads as "" (Jinja's default Undefined).
std::string str_or_empty(const Value& v) { return v.is_undefined() ? "" : to_str(v); }
const Value& test_arg(const std::string& name, const Args& args) {
  if (args.empty()) type_error("test '" + name + "' needs an argument");
  return args[0];
}
bool test_defined(const std::string&, const Value& v, const Args&) { return !v.is_undefined(); }

bool test_undefined(const std::string&, const Value& v, const Args&) { return v.is_undefined(); }

bool test_none(const std::string&, const Value& v, const Args&) { return v.is_none(); }

bool test_string(const std::string&, const Value& v, const Args&) { return v.is_string(); }

bool test_number(const std::string&, const Value& v, const Args&) {
  return v.is_number() || v.is_bool();
}

bool test_integer(const std::string&, const Value& v, const Args&) { return v.is_int(); }

bool test_float(const std::string&, const Value& v, const Args&) {
  return v.is_number() && !v.is_int();
}

bool test_boolean(const std::string&, const Value& v, const Args&) { return v.is_bool(); }

bool test_true(const std::string&, const Value& v, const Args&) {
  return v.is_bool() && v.json().get<bool>();
}

bool test_false(const std::string&, const Value& v, const Args&) {
  return v.is_bool() && !v.json().get<bool>();
}

bool test_mapping(const std::string&, const Value& v, const Args&) { return v.is_dict(); }

// Jinja's Undefined supports iteration and len(), so it counts as iterable and as a sequence.
bool test_iterable(const std::string&, const Value& v, const Args&) {
  return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
}

bool test_sequence(const std::string&, const Value& v, const Args&) {
  return v.is_undefined() || v.is_list() || v.is_dict() || v.is_string();
}

bool test_callable(const std::string&, const Value& v, const Args&) {
  return v.kind() == Value::Kind::Callable;
}

bool test_equalto(const std::string& name, const Value& v, const Args& args) {
  return equals(v, test_arg(name, args));
}

bool test_ne(const std::string& name, const Value& v, const Args& args) {
  return !equals(v, test_arg(name, args));
}

bool test_lt(const std::string& name, const Value& v, const Args& args) {
  return py_compare(v, test_arg(name, args)) < 0;
}

bool test_le(const std::string& name, const Value& v, const Args& args) {
  return py_compare(v, test_arg(name, args)) <= 0;
}

bool test_gt(const std::string& name, const Value& v, const Args& args) {
  return py_compare(v, test_arg(name, args)) > 0;
}

bool test_ge(const std::string& name, const Value& v, const Args& args) {
  return py_compare(v, test_arg(name, args)) >= 0;
}

bool test_odd(const std::string& name, const Value& v, const Args& args) {
  if (!v.is_int()) type_error("test '" + name + "' needs an integer");
  if (name == "divisibleby") {
    const Value& d = test_arg(name, args);
    if (!d.is_int() || d.as_int() == 0) type_error("divisibleby needs a non-zero integer");
    return v.as_int() % d.as_int() == 0;
  }
  return (v.as_int() % 2 != 0) == (name == "odd");
}

bool test_lower(const std::string&, const Value& v, const Args&) {
  return v.is_string() && icu_case(v.str(), 0) == v.str();
}

bool test_upper(const std::string&, const Value& v, const Args&) {
  return v.is_string() && icu_case(v.str(), 1) == v.str();
}

bool test_in(const std::string& name, const Value& v, const Args& args) {
  const Value& seq = test_arg(name, args);
  if (seq.is_string()) {
    if (!v.is_string()) return false;
    sandbox::charge_search(seq.str().size(), v.str().size());
    return seq.str().find(v.str()) != std::string::npos;
  }
  if (seq.is_list()) return list_contains(seq.json(), v);
  for (const auto& item : iterate(seq)) {
    if (equals(item, v)) return true;
  }
  return false;
}

bool test_sameas(const std::string& name, const Value& v, const Args& args) {
  return equals(v, test_arg(name, args)) && type_name(v) == type_name(test_arg(name, args));
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {
      {"defined", test_defined},
      {"undefined", test_undefined},
      {"none", test_none},
      {"string", test_string},
      {"number", test_number},
      {"integer", test_integer},
      {"float", test_float},
      {"boolean", test_boolean},
      {"true", test_true},
      {"false", test_false},
      {"mapping", test_mapping},
      {"iterable", test_iterable},
      {"sequence", test_sequence},
      {"callable", test_callable},
      {"equalto", test_equalto},
      {"eq", test_equalto},
      {"==", test_equalto},
      {"ne", test_ne},
      {"!=", test_ne},
      {"lt", test_lt},
      {"<", test_lt},
      {"le", test_le},
      {"<=", test_le},
      {"gt", test_gt},
      {">", test_gt},
      {"ge", test_ge},
      {">=", test_ge},
      {"odd", test_odd},
      {"even", test_odd},
      {"divisibleby", test_odd},
      {"lower", test_lower},
      {"upper", test_upper},
      {"in", test_in},
      {"sameas", test_sameas},
  };
  return table;
}

Value filter_trim(const std::string&, const Value& v, const Args& args, const Kwargs& kwargs) {
  return Value(Json(py_strip(str_or_empty(v), arg(args, kwargs, 0, "chars"), true, true)));
}

Value filter_length(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(py_len(v)));
}

Value filter_string(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(to_str(v)));
}

Value filter_upper(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(icu_case(str_or_empty(v), 1)));
}

Value filter_lower(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(icu_case(str_or_empty(v), 0)));
}

Value filter_capitalize(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(capitalize(str_or_empty(v))));
}

Value filter_title(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(title(str_or_empty(v))));
}

Value filter_safe(const std::string&, const Value& v, const Args&, const Kwargs&) { return v; }

// transformers' tojson(x, ensure_ascii, indent, ...) is only ever called with keywords.
Value filter_tojson(const std::string& name, const Value& v, const Args& args,
                    const Kwargs& kwargs) {
  JsonDumpOptions o;
  if (const Value* indent = arg(args, kwargs, 1000, "indent"); indent && !indent->is_none()) {
    const int64_t spaces = indent->is_int() ? std::max<int64_t>(0, indent->as_int()) : 0;
    sandbox::check_string_bytes(static_cast<size_t>(spaces));
    o.indent = indent->is_int() ? std::string(static_cast<size_t>(spaces), ' ') : to_str(*indent);
    o.item_separator = ",";
  }
  if (!args.empty())
    type_error(filter_who(name) + ": pass options by keyword, e.g. tojson(indent=2)");
  o.ensure_ascii = arg_bool(args, kwargs, 1000, "ensure_ascii", false);
  o.sort_keys = arg_bool(args, kwargs, 1000, "sort_keys", false);
  if (const Value* sep = arg(args, kwargs, 1000, "separators");
      sep && sep->is_list() && sep->json().size() == 2) {
    o.item_separator = sep->json()[0].get<std::string>();
    o.key_separator = sep->json()[1].get<std::string>();
  }
  if (v.is_undefined()) type_error(filter_who(name) + ": value is undefined");
  return Value(Json(json_dumps(to_json(v, filter_who(name)), o)));
}

Value filter_default(const std::string&, const Value& v, const Args& args, const Kwargs& kwargs) {
  const Value* def = arg(args, kwargs, 0, "default_value");
  const bool boolean = arg_bool(args, kwargs, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return def ? *def : Value(Json(""));
  return v;
}

Value filter_items(const std::string& name, const Value& v, const Args&, const Kwargs&) {
  if (v.is_undefined()) return Value(Json::array());
  if (!v.is_dict()) type_error(filter_who(name) + ": expected a mapping, got " + type_name(v));
  Json out = Json::array();
  for (auto it = v.json().begin(); it != v.json().end(); ++it)
    out.push_back(Json::array({it.key(), it.value()}));
  return Value(out);
}

Value filter_first(const std::string& name, const Value& v, const Args&, const Kwargs&) {
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("first/last of empty sequence");
  return name == "first" ? items.front() : items.back();
}

Value filter_join(const std::string& name, const Value& v, const Args& args, const Kwargs& kwargs) {
  const std::string sep = arg_str(args, kwargs, 0, "d", "", filter_who(name));
  const Value* attr = arg(args, kwargs, 1, "attribute");
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attr && attr->is_string() ? attribute_path(item, attr->str()) : item);
    sandbox::check_string_bytes(out.size());  // a long separator repeats between every item
  }
  return Value(Json(out));
}

Value filter_list(const std::string& name, const Value& v, const Args&, const Kwargs&) {
  return list_of(iterate(v), filter_who(name));
}

Value filter_selectattr(const std::string&, const Value& v, const Args& args, const Kwargs&) {
  return filter_items(v, args, true, true);
}

Value filter_rejectattr(const std::string&, const Value& v, const Args& args, const Kwargs&) {
  return filter_items(v, args, true, false);
}

Value filter_select(const std::string&, const Value& v, const Args& args, const Kwargs&) {
  return filter_items(v, args, false, true);
}

Value filter_reject(const std::string&, const Value& v, const Args& args, const Kwargs&) {
  return filter_items(v, args, false, false);
}

Value filter_map(const std::string& name, const Value& v, const Args& args, const Kwargs& kwargs) {
  std::vector<Value> out;
  if (const Value* attr = arg(args, kwargs, 1000, "attribute")) {
    const Value* def = arg(args, kwargs, 1000, "default");
    for (const auto& item : iterate(v)) {
      Value x = attribute_path(item, to_str(*attr));
      out.push_back(x.is_undefined() && def ? *def : x);
    }
  } else {
    if (args.empty() || !args[0].is_string())
      type_error(filter_who(name) + ": expected a filter name or attribute=");
    const std::string f = args[0].str();
    if (!is_known_filter(f)) type_error(filter_who(name) + ": unsupported filter '" + f + "'");
    const Args rest(args.begin() + 1, args.end());
    for (const auto& item : iterate(v)) out.push_back(apply_filter(f, item, rest, kwargs));
  }
  return list_of(out, filter_who(name));
}

Value filter_reverse(const std::string& name, const Value& v, const Args&, const Kwargs&) {
  if (v.is_string()) {
    auto cps = code_points(v.str());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value(Json(out));
  }
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return list_of(items, filter_who(name));
}

Value filter_int(const std::string& name, const Value& v, const Args& args, const Kwargs& kwargs) {
  return number_op_int(v, arg(args, kwargs, 0, "default"), filter_who(name));
}

Value filter_float(const std::string&, const Value& v, const Args& args, const Kwargs& kwargs) {
  if (v.is_number()) return Value(Json(v.as_double()));
  if (v.is_bool()) return Value(Json(v.json().get<bool>() ? 1.0 : 0.0));
  if (v.is_string()) {
    try {
      size_t used = 0;
      const std::string s = py_strip(v.str(), nullptr, true, true);
      const double d = std::stod(s, &used);
      if (used == s.size()) return Value(Json(d));
    } catch (const std::exception&) {
    }
  }
  const Value* def = arg(args, kwargs, 0, "default");
  return def ? *def : Value(Json(0.0));
}

Value filter_abs(const std::string& name, const Value& v, const Args&, const Kwargs&) {
  if (v.is_int()) return Value(Json(std::llabs(v.as_int())));
  if (v.is_number()) return Value(Json(std::fabs(v.as_double())));
  type_error(filter_who(name) + ": expected a number");
}

Value filter_replace(const std::string& name, const Value& v, const Args& args,
                     const Kwargs& kwargs) {
  const Value* count = arg(args, kwargs, 2, "count");
  return Value(
      Json(py_replace(str_or_empty(v), arg_str(args, kwargs, 0, "old", "", filter_who(name)),
                      arg_str(args, kwargs, 1, "new", "", filter_who(name)),
                      count && count->is_int() ? count->as_int() : -1)));
}

Value filter_unique(const std::string& name, const Value& v, const Args& args,
                    const Kwargs& kwargs) {
  const bool case_sensitive =
      arg_bool(args, kwargs, name == "sort" ? 1 : 0, "case_sensitive", false);
  const Value* attr = arg(args, kwargs, name == "sort" ? 2 : 1, "attribute");
  const auto key = [&](const Value& item) {
    return attr && attr->is_string() ? attribute_path(item, attr->str()) : item;
  };
  auto items = iterate(v);
  // Keys are computed once per item, not once per comparison (a case-insensitive comparison
  // lowercases both strings through ICU).
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const auto& item : items) {
    Value k = key(item);
    if (!case_sensitive && k.is_string()) k = Value(Json(icu_case(k.str(), 0)));
    keys.push_back(std::move(k));
  }
  if (name == "sort") {
    const bool reverse = arg_bool(args, kwargs, 0, "reverse", false);
    // About n log2(n) comparisons.
    uint64_t log2n = 1;
    while ((uint64_t{1} << log2n) < items.size()) ++log2n;
    sandbox::charge_items(items.size() * log2n);
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const Value &x = keys[a], &y = keys[b];
      // Strings were lowercased above; lists still compare case-insensitively inside.
      const int c = py_compare(x, y, case_sensitive || (x.is_string() && y.is_string()));
      return reverse ? c > 0 : c < 0;
    });
    std::vector<Value> sorted;
    sorted.reserve(items.size());
    for (size_t i : order) sorted.push_back(items[i]);
    return list_of(sorted, filter_who(name));
  }
  // Items seen so far, in a hash set: equal keys (Python equality: 1 == 1.0 == True) hash alike.
  const auto hash = [&](size_t i) { return value_hash(keys[i]); };
  const auto same = [&](size_t a, size_t b) { return equals(keys[a], keys[b]); };
  std::unordered_set<size_t, decltype(hash), decltype(same)> seen(items.size(), hash, same);
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (seen.insert(i).second) out.push_back(items[i]);
  }
  return list_of(out, filter_who(name));
}

Value filter_sum(const std::string& name, const Value& v, const Args& args, const Kwargs& kwargs) {
  const Value* attr = arg(args, kwargs, 0, "attribute");
  const Value* start = arg(args, kwargs, 1, "start");
  bool is_float = start && start->is_number() && !start->is_int();
  double total = start && start->is_number() ? start->as_double() : 0.0;
  for (const auto& item : iterate(v)) {
    const Value x = attr && attr->is_string() ? attribute_path(item, attr->str()) : item;
    if (!x.is_number()) type_error(filter_who(name) + ": can only sum numbers");
    is_float = is_float || !x.is_int();
    total += x.as_double();
  }
  return is_float ? Value(Json(total)) : Value(Json(static_cast<int64_t>(total)));
}

Value filter_min(const std::string& name, const Value& v, const Args& args, const Kwargs& kwargs) {
  const auto items = iterate(v);
  if (items.empty()) return Value::undefined("min/max of empty sequence");
  const bool case_sensitive = arg_bool(args, kwargs, 0, "case_sensitive", false);
  Value best = items[0];
  for (const auto& item : items) {
    const int c = py_compare(item, best, case_sensitive);
    if ((name == "min" && c < 0) || (name == "max" && c > 0)) best = item;
  }
  return best;
}

// 'common' is Python's round(): halves go to the even neighbour.
Value filter_round(const std::string& name, const Value& v, const Args& args,
                   const Kwargs& kwargs) {
  if (!v.is_number()) type_error(filter_who(name) + ": expected a number");
  const Value* p = arg(args, kwargs, 0, "precision");
  const std::string method = arg_str(args, kwargs, 1, "method", "common", filter_who(name));
  const double scale = std::pow(10.0, p && p->is_int() ? static_cast<double>(p->as_int()) : 0.0);
  const double x = v.as_double() * scale;
  const double r = method == "ceil"    ? std::ceil(x)
                   : method == "floor" ? std::floor(x)
                                       : std::nearbyint(x);
  return Value(Json(r / scale));
}

Value filter_indent(const std::string&, const Value& v, const Args& args, const Kwargs& kwargs) {
  const Value* width = arg(args, kwargs, 0, "width");
  const size_t spaces =
      width && width->is_int() ? static_cast<size_t>(std::max<int64_t>(0, width->as_int())) : 4;
  sandbox::check_string_bytes(spaces);
  const std::string pad = width && width->is_string() ? width->str() : std::string(spaces, ' ');
  const bool first = arg_bool(args, kwargs, 1, "first", false);
  const bool blank = arg_bool(args, kwargs, 2, "blank", false);
  std::string s = str_or_empty(v), out;
  size_t start = 0;
  bool is_first = true;
  while (true) {
    const size_t nl = s.find('\n', start);
    const std::string line =
        s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool indent_this = (is_first ? first : true) && (blank || !line.empty());
    out += (indent_this ? pad : "") + line;
    sandbox::check_string_bytes(out.size());
    if (nl == std::string::npos) break;
    out += "\n";
    start = nl + 1;
    is_first = false;
  }
  return Value(Json(out));
}

Value filter_wordcount(const std::string&, const Value& v, const Args&, const Kwargs&) {
  return Value(Json(static_cast<int64_t>(py_split(str_or_empty(v), nullptr, -1).size())));
}

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> table = {
      {"trim", filter_trim},
      {"length", filter_length},
      {"count", filter_length},
      {"string", filter_string},
      {"upper", filter_upper},
      {"lower", filter_lower},
      {"capitalize", filter_capitalize},
      {"title", filter_title},
      {"safe", filter_safe},
      {"tojson", filter_tojson},
      {"default", filter_default},
      {"d", filter_default},
      {"items", filter_items},
      {"first", filter_first},
      {"last", filter_first},
      {"join", filter_join},
      {"list", filter_list},
      {"selectattr", filter_selectattr},
      {"rejectattr", filter_rejectattr},
      {"select", filter_select},
      {"reject", filter_reject},
      {"map", filter_map},
      {"reverse", filter_reverse},
      {"int", filter_int},
      {"float", filter_float},
      {"abs", filter_abs},
      {"replace", filter_replace},
      {"unique", filter_unique},
      {"sort", filter_unique},
      {"sum", filter_sum},
      {"min", filter_min},
      {"max", filter_min},
      {"round", filter_round},
      {"indent", filter_indent},
      {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
bool is_known_filter(const std::string& n) { return filters().count(n) > 0; }

bool is_known_test(const std::string& n) { return tests().count(n) > 0; }

bool is_known_global(const std::string& n) {
  return n == "raise_exception" || n == "namespace" || n == "range" || n == "strftime_now" ||
         n == "dict";
}

bool is_known_method(const std::string& n) {
  static const std::set<std::string> names = {
      "strip", "lstrip", "rstrip",  "split", "rsplit",     "startswith", "endswith",
      "upper", "lower",  "replace", "title", "capitalize", "find",       "join",
      "items", "keys",   "values",  "get",   "count"};
  return names.count(n) > 0;
}

// ---------------------------------------------------------------------------------------------
Value get_attr(const Value& object, const std::string& name) {
  if (object.is_undefined()) {
    type_error("'" + (object.hint().empty() ? std::string("value") : object.hint()) +
               "' is undefined (reading ." + name + ")");
  }
  if (object.kind() == Value::Kind::Namespace) {
    const auto it = object.ns()->attrs.find(name);
    return it == object.ns()->attrs.end() ? Value::undefined(name) : it->second;
  }
  if (object.is_dict()) {
    const auto it = object.json().find(name);
    return it == object.json().end() ? Value::undefined(name) : Value::part_of(object, *it);
  }
  return Value::undefined(name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) {
    type_error("'" + (object.hint().empty() ? std::string("value") : object.hint()) +
               "' is undefined (indexing with " + to_str(key) + ")");
  }
  if (key.is_string() && (object.kind() == Value::Kind::Namespace || object.is_dict())) {
    return get_attr(object, key.str());
  }
  if ((key.is_int() || key.is_bool()) && (object.is_list() || object.is_string())) {
    const int64_t len = py_len(object);
    int64_t i = key.is_bool() ? (key.json().get<bool>() ? 1 : 0) : key.as_int();
    if (i < 0) i += len;
    if (i < 0 || i >= len) return Value::undefined("index " + std::to_string(key.as_int()));
    if (object.is_list()) return Value::part_of(object, object.json()[static_cast<size_t>(i)]);
    return Value(Json(code_points(object.str())[static_cast<size_t>(i)]));
  }
  return Value::undefined(to_str(key));
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  if (v.is_undefined()) return out;
  if (v.is_list() || v.is_dict()) sandbox::charge_items(v.json().size());
  if (v.is_list()) {
    out.reserve(v.json().size());
    for (const auto& e : v.json()) out.push_back(Value::part_of(v, e));
  } else if (v.is_dict()) {
    for (auto it = v.json().begin(); it != v.json().end(); ++it) out.emplace_back(Json(it.key()));
  } else if (v.is_string()) {
    for (const auto& c : code_points(v.str())) out.emplace_back(Json(c));
  } else {
    type_error("'" + type_name(v) + "' object is not iterable");
  }
  return out;
}

int64_t py_len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) {
    sandbox::charge_bytes(v.str().size());
    return static_cast<int64_t>(utf8::length(v.str()));
  }
  if (v.is_list() || v.is_dict()) return static_cast<int64_t>(v.json().size());
  if (v.kind() == Value::Kind::Namespace) return static_cast<int64_t>(v.ns()->attrs.size());
  type_error("object of type '" + type_name(v) + "' has no len()");
}

Value slice(const Value& v, const Value& start, const Value& stop, const Value& step_v) {
  if (!v.is_list() && !v.is_string()) type_error("cannot slice a " + type_name(v));
  const int64_t len = py_len(v);
  const auto opt = [](const Value& x) -> std::optional<int64_t> {
    if (x.is_undefined() || x.is_none()) return std::nullopt;
    if (!x.is_int()) type_error("slice indices must be integers");
    return x.as_int();
  };
  const int64_t step = opt(step_v).value_or(1);
  if (step == 0) type_error("slice step cannot be zero");
  // Python's slice.indices().
  const auto clamp = [&](std::optional<int64_t> x, int64_t def) {
    if (!x) return def;
    int64_t i = *x;
    if (i < 0) i += len;
    if (step > 0) return std::clamp<int64_t>(i, 0, len);
    return std::clamp<int64_t>(i, -1, len - 1);
  };
  const int64_t b = clamp(opt(start), step > 0 ? 0 : len - 1);
  const int64_t e = clamp(opt(stop), step > 0 ? len : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; step > 0 ? i < e : i > e; i += step) idx.push_back(i);
  sandbox::charge_items(idx.size());
  if (v.is_list()) {
    Json out = Json::array();
    for (int64_t i : idx) out.push_back(v.json()[static_cast<size_t>(i)]);
    return Value(out);
  }
  const auto cps = code_points(v.str());
  std::string out;
  for (int64_t i : idx) out += cps[static_cast<size_t>(i)];
  return Value(Json(out));
}

// ---------------------------------------------------------------------------------------------
bool apply_test(const std::string& name, const Value& v, const Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) type_error("unsupported test '" + name + "'");
  return it->second(name, v, args);
}

Value apply_filter(const std::string& name, const Value& v, const Args& args,
                   const Kwargs& kwargs) {
  const auto it = filters().find(name);
  if (it == filters().end()) type_error("unsupported filter '" + name + "'");
  return it->second(name, v, args, kwargs);
}

// ---------------------------------------------------------------------------------------------
Value call_method(const Value& object, const std::string& name, const Args& args,
                  const Kwargs& kwargs) {
  const std::string who = type_name(object) + "." + name + "()";
  if (object.is_string()) {
    const std::string& s = object.str();
    if (name == "strip") return Value(Json(py_strip(s, arg(args, kwargs, 0, "chars"), true, true)));
    if (name == "lstrip")
      return Value(Json(py_strip(s, arg(args, kwargs, 0, "chars"), true, false)));
    if (name == "rstrip")
      return Value(Json(py_strip(s, arg(args, kwargs, 0, "chars"), false, true)));
    if (name == "upper") return Value(Json(icu_case(s, 1)));
    if (name == "lower") return Value(Json(icu_case(s, 0)));
    if (name == "title") return Value(Json(title(s)));
    if (name == "capitalize") return Value(Json(capitalize(s)));
    if (name == "split" || name == "rsplit") {
      const Value* maxsplit = arg(args, kwargs, 1, "maxsplit");
      if (name == "rsplit" && maxsplit && maxsplit->is_int() && maxsplit->as_int() >= 0) {
        type_error(who + ": maxsplit is not supported");
      }
      Json out = Json::array();
      for (auto& part : py_split(s, arg(args, kwargs, 0, "sep"),
                                 maxsplit && maxsplit->is_int() ? maxsplit->as_int() : -1)) {
        out.push_back(part);
      }
      return Value(out);
    }
    if (name == "startswith" || name == "endswith") {
      const Value* what = arg(args, kwargs, 0, "prefix");
      if (!what) type_error(who + ": missing argument");
      return Value(Json(starts_or_ends(s, *what, name == "startswith")));
    }
    if (name == "replace") {
      const Value* count = arg(args, kwargs, 2, "count");
      return Value(Json(py_replace(s, arg_str(args, kwargs, 0, "old", "", who),
                                   arg_str(args, kwargs, 1, "new", "", who),
                                   count && count->is_int() ? count->as_int() : -1)));
    }
    if (name == "find" || name == "count") {
      const std::string sub = arg_str(args, kwargs, 0, "sub", "", who);
      sandbox::charge_search(s.size(), sub.size());
      if (name == "find") {
        const size_t pos = s.find(sub);
        return Value(Json(pos == std::string::npos
                              ? int64_t{-1}
                              : static_cast<int64_t>(utf8::length(s.substr(0, pos)))));
      }
      if (sub.empty()) return Value(Json(static_cast<int64_t>(utf8::length(s)) + 1));
      int64_t n = 0;
      for (size_t pos = s.find(sub); pos != std::string::npos; pos = s.find(sub, pos + sub.size()))
        ++n;
      return Value(Json(n));
    }
    if (name == "join") {
      if (args.empty()) type_error(who + ": missing argument");
      std::string out;
      bool first = true;
      for (const auto& item : iterate(args[0])) {
        if (!item.is_string())
          type_error(who + ": sequence item is " + type_name(item) + ", expected string");
        if (!first) out += s;
        first = false;
        out += item.str();
        sandbox::check_string_bytes(out.size());
      }
      return Value(Json(out));
    }
  }
  if (object.is_dict()) {
    const Json& d = object.json();
    if (name == "items") return apply_filter("items", object, {}, {});
    if (name == "keys") {
      Json out = Json::array();
      for (auto it = d.begin(); it != d.end(); ++it) out.push_back(it.key());
      return Value(out);
    }
    if (name == "values") {
      Json out = Json::array();
      for (auto it = d.begin(); it != d.end(); ++it) out.push_back(it.value());
      return Value(out);
    }
    if (name == "get") {
      if (args.empty() || !args[0].is_string()) type_error(who + ": key must be a string");
      const auto it = d.find(args[0].str());
      if (it != d.end()) return Value(*it);
      return args.size() > 1 ? args[1] : Value(Json(nullptr));
    }
  }
  if (object.is_undefined())
    type_error("'" + object.hint() + "' is undefined (calling ." + name + "())");
  type_error("unsupported method '" + name + "' on " + type_name(object));
}

Value call_global(const std::string& name, const Args& args, const Kwargs& kwargs) {
  if (name == "raise_exception") {
    throw TemplateRaised(args.empty() ? std::string() : to_str(args[0]));
  }
  if (name == "namespace" || name == "dict") {
    Json attrs = Json::object();
    std::map<std::string, Value> ns_attrs;
    if (!args.empty()) {
      if (!args[0].is_dict()) type_error(name + "(): positional argument must be a mapping");
      for (auto it = args[0].json().begin(); it != args[0].json().end(); ++it) {
        attrs[it.key()] = it.value();
        ns_attrs[it.key()] = Value(it.value());
      }
    }
    for (const auto& [k, v] : kwargs) {
      ns_attrs[k] = v;
      if (name == "dict") attrs[k] = to_json(v, "dict()");
    }
    if (name == "dict") return Value(attrs);
    auto ns = std::make_shared<Namespace>();
    ns->attrs = std::move(ns_attrs);
    return Value::make_namespace(ns);
  }
  if (name == "range") {
    std::vector<int64_t> n;
    for (const auto& a : args) {
      if (!a.is_int()) type_error("range(): arguments must be integers");
      n.push_back(a.as_int());
    }
    if (n.empty() || n.size() > 3) type_error("range() takes 1 to 3 arguments");
    const int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1],
                  step = n.size() == 3 ? n[2] : 1;
    if (step == 0) type_error("range() step must not be zero");
    // Python's len(range(...)), in unsigned arithmetic: stop - start may not fit in int64.
    const auto span = [](int64_t from, int64_t to) {
      return static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
    };
    const uint64_t len =
        step > 0 ? (start < stop ? (span(start, stop) - 1) / static_cast<uint64_t>(step) + 1 : 0)
                 : (start > stop ? (span(stop, start) - 1) / span(step, 0) + 1 : 0);
    if (len > static_cast<uint64_t>(sandbox::kMaxRange)) type_error(sandbox::kRangeTooBig);
    Json out = Json::array();
    for (uint64_t k = 0, i = static_cast<uint64_t>(start); k < len;
         ++k, i += static_cast<uint64_t>(step))
      out.push_back(static_cast<int64_t>(i));  // wraps like the int64 values it stands for
    return Value(out);
  }
  if (name == "strftime_now") {
    if (args.empty() || !args[0].is_string())
      type_error("strftime_now(): expected a format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[256];
    const size_t n = std::strftime(buf, sizeof(buf), args[0].str().c_str(), &tm);
    return Value(Json(std::string(buf, n)));
  }
  type_error("unsupported function '" + name + "'");
}

}  // namespace kubetune::text::jinja
