// Runtime values of the chat-template interpreter. Data (None, bools, numbers, strings, lists,
// dicts) lives in an insertion-ordered JSON value so dict order follows Python; the few Jinja-only
// kinds (undefined, namespace, callable) are separate.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kubetune::text::jinja {

using Json = nlohmann::ordered_json;

class Value;
using Args = std::vector<Value>;
using Kwargs = std::vector<std::pair<std::string, Value>>;

struct Callable {
  std::string name;
  std::function<Value(const Args&, const Kwargs&)> fn;
};

struct Namespace {
  std::map<std::string, Value> attrs;
};

class Value {
 public:
  enum class Kind { Undefined, Data, Namespace, Callable };

  Value() = default;  // undefined
  // Data is shared, never changed once built: copying a Value (a variable lookup, a loop item)
  // costs the same however big the data is.
  Value(Json j)  // NOLINT: implicit on purpose
      : kind_(Kind::Data), json_(std::make_shared<const Json>(std::move(j))) {}
  // `part` (an item or attribute inside `whole`'s data), sharing whole's data instead of copying.
  static Value part_of(const Value& whole, const Json& part) {
    Value v;
    v.kind_ = Kind::Data;
    v.json_ = std::shared_ptr<const Json>(whole.json_, &part);
    return v;
  }
  static Value undefined(std::string hint = "") {
    Value v;
    v.hint_ = std::move(hint);
    return v;
  }
  static Value make_namespace(std::shared_ptr<Namespace> ns) {
    Value v;
    v.kind_ = Kind::Namespace;
    v.ns_ = std::move(ns);
    return v;
  }
  static Value make_callable(std::shared_ptr<Callable> fn) {
    Value v;
    v.kind_ = Kind::Callable;
    v.fn_ = std::move(fn);
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_data() const { return kind_ == Kind::Data; }
  bool is_none() const { return is_data() && json().is_null(); }
  bool is_string() const { return is_data() && json().is_string(); }
  bool is_int() const { return is_data() && (json().is_number_integer()); }
  bool is_number() const { return is_data() && json().is_number(); }
  bool is_bool() const { return is_data() && json().is_boolean(); }
  bool is_list() const { return is_data() && json().is_array(); }
  bool is_dict() const { return is_data() && json().is_object(); }

  const Json& json() const {
    static const Json null_json;
    return json_ ? *json_ : null_json;
  }
  const std::string& str() const { return json().get_ref<const std::string&>(); }
  int64_t as_int() const {
    return json().is_number_integer() ? json().get<int64_t>()
                                      : static_cast<int64_t>(json().get<double>());
  }
  double as_double() const { return json().get<double>(); }
  const std::shared_ptr<Namespace>& ns() const { return ns_; }
  const std::shared_ptr<Callable>& fn() const { return fn_; }
  const std::string& hint() const { return hint_; }
  // Tuple literals behave as lists but print like Python tuples: (1, 2).
  bool is_tuple() const { return tuple_; }
  Value& mark_tuple() {
    tuple_ = true;
    return *this;
  }

 private:
  Kind kind_ = Kind::Undefined;
  std::shared_ptr<const Json> json_;  // null for the non-data kinds
  std::shared_ptr<Namespace> ns_;
  std::shared_ptr<Callable> fn_;
  bool tuple_ = false;
  std::string hint_;  // for undefined values: what was looked up, for error messages
};

// Python truthiness (undefined is false).
bool truthy(const Value& v);
// Python str() of a value, as Jinja prints it ({{ none }} -> "None", lists -> "['a', 1]").
std::string to_str(const Value& v);
// Python repr() of JSON data.
std::string py_repr(const Json& j);
// Python float repr (shortest round-trip, "1.0", "1e-05").
std::string py_float(double d);
// Python equality (1 == 1.0 == True, deep for lists/dicts).
bool equals(const Value& a, const Value& b);
bool equals(const Json& a, const Json& b);
// A hash consistent with equals(): equal values hash alike (1, 1.0 and True too).
size_t value_hash(const Value& v);
// Python's `item in list`, charging the sandbox budget for the items it looks at.
bool list_contains(const Json& list, const Value& item);

struct JsonDumpOptions {
  std::optional<std::string> indent;  // nullopt = single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};
// Python's json.dumps (what transformers' tojson filter calls).
std::string json_dumps(const Json& j, const JsonDumpOptions& options);

// Name of a value's type for error messages ("string", "list", ...).
std::string type_name(const Value& v);

// How big a JSON value is, for the limits of sandbox.h: counted without recursion (the value may
// be deeper than the stack allows), and only until a count passes its limit.
struct JsonSize {
  size_t nodes = 0;  // values, containers included
  size_t bytes = 0;  // text in strings and object keys
  int depth = 0;     // 1 for a scalar
};
JsonSize json_size(const Json& j);
// Throws std::runtime_error when a value the template builds is past a limit of sandbox.h.
void check_sandbox_size(const JsonSize& size);
inline void check_sandbox_size(const Json& j) { check_sandbox_size(json_size(j)); }

}  // namespace kubetune::text::jinja
