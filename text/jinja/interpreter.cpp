#include "text/jinja/interpreter.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include "text/jinja/builtins.h"
#include "text/jinja/errors.h"
#include "text/jinja/sandbox.h"

namespace kubetune::text::jinja {
namespace {

// An error that already carries its template location.
class LocatedError : public std::runtime_error {
 public:
  LocatedError(Location l, const std::string& what)
      : std::runtime_error("line " + std::to_string(l.line) + ", column " +
                           std::to_string(l.column) + ": " + what) {}
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

std::string undefined_name(const Value& v) {
  return v.hint().empty() ? std::string("value") : v.hint();
}

void require_defined(const Value& v) {
  if (v.is_undefined()) fail("'" + undefined_name(v) + "' is undefined");
}

bool is_numeric(const Value& v) { return v.is_number() || v.is_bool(); }
bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t to_int(const Value& v) { return v.is_bool() ? (v.json().get<bool>() ? 1 : 0) : v.as_int(); }
double to_double(const Value& v) {
  return v.is_bool() ? (v.json().get<bool>() ? 1.0 : 0.0) : v.as_double();
}

// x * n without wrapping around; saturates, for size checks.
size_t times(size_t x, size_t n) {
  return n != 0 && x > std::numeric_limits<size_t>::max() / n ? std::numeric_limits<size_t>::max()
                                                              : x * n;
}

// Python's seq * n. The result's size is checked before anything is built, so `'a' * 10**12`
// fails at once instead of exhausting memory.
Value repeat(const Value& seq, int64_t n) {
  const auto count = static_cast<size_t>(std::max<int64_t>(n, 0));
  if (seq.is_string()) {
    sandbox::check_string_bytes(times(seq.str().size(), count));
    std::string out;
    for (size_t i = 0; i < count && !seq.str().empty(); ++i) out += seq.str();
    return Value(Json(out));
  }
  const JsonSize one = json_size(seq.json());  // the list and its items
  check_sandbox_size(JsonSize{times(one.nodes - 1, count) + 1, times(one.bytes, count), one.depth});
  Json out = Json::array();
  for (size_t i = 0; i < count && !seq.json().empty(); ++i) {
    for (const auto& e : seq.json()) out.push_back(e);
  }
  return Value(out);
}

// Python ints never overflow; ours are 64-bit, so a result out of range is an error (signed
// overflow would be undefined behaviour, and INT64_MIN // -1 a crash).
[[noreturn]] void int_overflow(const std::string& op) {
  fail("integer result of " + op + " out of the 64-bit range");
}

int64_t int_power(int64_t base, int64_t exponent) {  // exponent >= 0; by squaring: O(log n)
  int64_t result = 1;
  while (exponent > 0) {
    if ((exponent & 1) && __builtin_mul_overflow(result, base, &result)) int_overflow("**");
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) int_overflow("**");
  }
  return result;
}

Value int_arithmetic(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+" || op == "-" || op == "*") {
    const bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                          : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                      : __builtin_mul_overflow(x, y, &r);
    if (overflow) int_overflow(op);
    return Value(Json(r));
  }
  if (op == "//" || op == "%") {
    if (y == 0) fail("integer division or modulo by zero");
    if (x == std::numeric_limits<int64_t>::min() && y == -1) {
      if (op == "%") return Value(Json(int64_t{0}));
      int_overflow(op);
    }
    int64_t q = x / y;
    r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
      --q;
      r += y;
    }
    return Value(Json(op == "//" ? q : r));
  }
  if (y < 0) return Value(Json(std::pow(static_cast<double>(x), static_cast<double>(y))));
  return Value(Json(int_power(x, y)));  // "**"
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(Json(a.str() + b.str()));
    if (a.is_list() && b.is_list()) {
      Json out = a.json();
      for (const auto& e : b.json()) out.push_back(e);
      return Value(out);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, to_int(b));
    if (is_integral(a) && (b.is_string() || b.is_list())) return repeat(b, to_int(a));
  }
  if (!is_numeric(a) || !is_numeric(b)) {
    fail("unsupported operand types for " + op + ": '" + type_name(a) + "' and '" + type_name(b) +
         "'");
  }
  const bool ints = is_integral(a) && is_integral(b);
  if (op == "/") {
    if (to_double(b) == 0.0) fail("division by zero");
    return Value(Json(to_double(a) / to_double(b)));
  }
  if (ints && (op == "+" || op == "-" || op == "*" || op == "//" || op == "%" || op == "**"))
    return int_arithmetic(op, to_int(a), to_int(b));
  const double x = to_double(a), y = to_double(b);
  if (op == "+") return Value(Json(x + y));
  if (op == "-") return Value(Json(x - y));
  if (op == "*") return Value(Json(x * y));
  if (op == "**") return Value(Json(std::pow(x, y)));
  if (op == "//" || op == "%") {
    if (y == 0.0) fail("float division or modulo by zero");
    const double q = std::floor(x / y);
    return Value(Json(op == "//" ? q : x - q * y));
  }
  fail("unsupported operator '" + op + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (container.is_string()) {
    if (!item.is_string())
      fail("'in <string>' requires string as left operand, not " + type_name(item));
    sandbox::charge_search(container.str().size(), item.str().size());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.json().contains(item.str());
  if (container.kind() == Value::Kind::Namespace)
    return item.is_string() && container.ns()->attrs.count(item.str());
  if (container.is_list()) return list_contains(container.json(), item);
  for (const auto& e : iterate(container)) {
    if (equals(e, item)) return true;
  }
  return false;
}

Json to_data(const Value& v) {
  if (v.is_undefined()) fail("'" + undefined_name(v) + "' is undefined");
  if (!v.is_data()) fail("a " + type_name(v) + " cannot be stored in a list or dict");
  return v.json();
}

// One level of `level` for as long as it lives; past `limit` it throws too_deep() instead (a
// function, so that the message is only built when needed).
class Level {
 public:
  template <typename TooDeep>
  Level(int& level, int limit, const TooDeep& too_deep) : level_(level) {
    if (level_ == limit) fail(too_deep());
    ++level_;
  }
  ~Level() { --level_; }
  Level(const Level&) = delete;
  Level& operator=(const Level&) = delete;

 private:
  int& level_;
};

std::string eval_too_deep() {
  return "template recursion deeper than " + std::to_string(sandbox::kMaxEvalDepth) +
         " nested statements and expressions";
}

class Interpreter {
 public:
  explicit Interpreter(const std::map<std::string, Value>& variables) {
    scopes_.push_back(variables);
  }

  std::string run(const Body& program) {
    std::string out;
    if (exec_body(program, out) != Flow::Normal) fail("'break' or 'continue' outside a loop");
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec_body(const Body& body, std::string& out) {
    for (const auto& s : body) {
      const Flow f = exec(*s, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  // Anything an expression or statement throws is the template's fault: it gets the location.
  Flow exec(const Stmt& s, std::string& out) {
    try {
      const Level level(depth_, sandbox::kMaxEvalDepth, eval_too_deep);
      return exec_impl(s, out);
    } catch (const LocatedError&) {
      throw;
    } catch (const TemplateRaised&) {
      throw;
    } catch (const std::exception& e) {
      throw LocatedError(s.loc, e.what());
    }
  }

  // ---- sandbox budgets (sandbox.h) ----
  void write(std::string& out, const std::string& text) {
    written_ += text.size();
    if (written_ > sandbox::kMaxOutputBytes) {
      fail("template wrote more than " + std::to_string(sandbox::kMaxOutputBytes) +
           " bytes (template sandbox limit)");
    }
    out += text;
  }

  // A loop iteration or macro call. Without a budget, nested loops or a macro that calls itself
  // twice would run for ages, each step well inside the other limits.
  // Builtins charge the same budget (sandbox::charge_items() and the like) for work
  // proportional to their input.
  void step() { budget_.charge(sandbox::kItemsPerStep); }

  // A value the template built (by an operator, filter, call or literal) must fit the limits, and
  // building it (and measuring it here) costs work in proportion to its size.
  static Value built(Value v) {
    if (v.is_data()) {
      const JsonSize size = json_size(v.json());
      check_sandbox_size(size);
      sandbox::charge_items(size.nodes);
      sandbox::charge_bytes(size.bytes);
    }
    return v;
  }

  Flow exec_impl(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        write(out, s.text);
        return Flow::Normal;
      case Stmt::Kind::Output:
        write(out, to_str(eval(*s.expr)));
        return Flow::Normal;
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (truthy(eval(*s.conds[i]))) return exec_body(s.bodies[i], out);
        }
        return exec_body(s.else_body, out);
      case Stmt::Kind::For:
        exec_for(s, out);
        return Flow::Normal;
      case Stmt::Kind::Set:
        exec_set(s);
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        std::string captured;
        exec_body(s.body, captured);
        scopes_.back()[s.text] = Value(Json(captured));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        define_macro(s);
        return Flow::Normal;
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Generation:
        return exec_body(s.body, out);
    }
    return Flow::Normal;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& item,
                    std::map<std::string, Value>& scope) {
    if (targets.size() == 1) {
      scope[targets[0]] = item;
      return;
    }
    const auto parts = iterate(item);
    if (parts.size() != targets.size()) {
      fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
           std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope[targets[i]] = parts[i];
  }

  void exec_for(const Stmt& s, std::string& out) {
    std::vector<Value> items;
    for (auto& item : iterate(eval(*s.expr))) {
      if (s.filter) {
        step();  // the filter runs for every item, even when the body runs for none
        scopes_.emplace_back();
        bind_targets(s.targets, item, scopes_.back());
        const bool keep = truthy(eval(*s.filter));
        scopes_.pop_back();
        if (!keep) continue;
      }
      items.push_back(std::move(item));
    }
    if (items.empty()) {
      exec_body(s.else_body, out);
      return;
    }
    const auto n = static_cast<int64_t>(items.size());
    // loop.previtem and loop.nextitem copy every item twice.
    for (const auto& item : items) {
      if (item.is_data() && item.json().is_structured())
        sandbox::charge_items(2 * json_size(item.json()).nodes);
    }
    for (int64_t i = 0; i < n; ++i) {
      step();
      // Field by field: an initializer list would build (and free) a temporary per field, a
      // cost every loop iteration pays.
      Json loop = Json::object();
      loop["index"] = i + 1;
      loop["index0"] = i;
      loop["revindex"] = n - i;
      loop["revindex0"] = n - i - 1;
      loop["first"] = i == 0;
      loop["last"] = i == n - 1;
      loop["length"] = n;
      loop["depth"] = 1;
      loop["depth0"] = 0;
      if (i > 0 && items[static_cast<size_t>(i - 1)].is_data())
        loop["previtem"] = items[static_cast<size_t>(i - 1)].json();
      if (i + 1 < n && items[static_cast<size_t>(i + 1)].is_data())
        loop["nextitem"] = items[static_cast<size_t>(i + 1)].json();
      scopes_.emplace_back();
      scopes_.back()["loop"] = Value(std::move(loop));
      bind_targets(s.targets, items[static_cast<size_t>(i)], scopes_.back());
      Flow f;
      try {
        f = exec_body(s.body, out);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
  }

  void exec_set(const Stmt& s) {
    const Value value = eval(*s.expr);
    if (!s.attr.empty()) {
      const Value target = lookup(s.targets[0]);
      if (target.kind() != Value::Kind::Namespace) {
        fail("cannot assign attribute '" + s.attr + "' on '" + s.targets[0] + "' (" +
             type_name(target) + "); only namespace() objects support attribute assignment");
      }
      target.ns()->attrs[s.attr] = value;
      return;
    }
    bind_targets(s.targets, value, scopes_.back());
  }

  void define_macro(const Stmt& s) {
    auto callable = std::make_shared<Callable>();
    callable->name = s.text;
    const Stmt* def = &s;
    callable->fn = [this, def](const Args& args, const Kwargs& kwargs) {
      step();
      const Level call(calls_, sandbox::kMaxCallDepth, [def] {
        return "template recursion deeper than " + std::to_string(sandbox::kMaxCallDepth) +
               " macro calls (in macro '" + def->text + "')";
      });
      if (args.size() > def->params.size())
        fail("macro '" + def->text + "' takes " + std::to_string(def->params.size()) +
             " arguments");
      std::map<std::string, Value> params;
      for (size_t i = 0; i < def->params.size(); ++i) {
        const auto& [name, default_expr] = def->params[i];
        if (i < args.size()) {
          params[name] = args[i];
        } else if (default_expr) {
          params[name] = eval(*default_expr);
        } else {
          params[name] = Value::undefined(name);
        }
      }
      for (const auto& [k, v] : kwargs) {
        bool known = false;
        for (const auto& p : def->params) known = known || p.first == k;
        if (!known) fail("macro '" + def->text + "' has no parameter '" + k + "'");
        params[k] = v;
      }
      // A macro sees the template's top-level variables and its own parameters, not the caller's
      // locals.
      std::vector<std::map<std::string, Value>> saved;
      saved.swap(scopes_);
      scopes_.push_back(saved.front());
      scopes_.push_back(std::move(params));
      std::string out;
      try {
        exec_body(def->body, out);
      } catch (...) {
        saved.front() = scopes_.front();
        scopes_.swap(saved);
        throw;
      }
      saved.front() = scopes_.front();
      scopes_.swap(saved);
      return Value(Json(out));
    };
    scopes_.back()[s.text] = Value::make_callable(callable);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    // Global functions are ordinary (defined) names, e.g. `strftime_now is defined`.
    if (is_known_global(name)) {
      auto fn = std::make_shared<Callable>();
      fn->name = name;
      fn->fn = [name](const Args& args, const Kwargs& kwargs) {
        return call_global(name, args, kwargs);
      };
      return Value::make_callable(fn);
    }
    return Value::undefined(name);
  }

  Value eval(const Expr& e) {
    try {
      const Level level(depth_, sandbox::kMaxEvalDepth, eval_too_deep);
      return eval_impl(e);
    } catch (const LocatedError&) {
      throw;
    } catch (const TemplateRaised&) {
      throw;
    } catch (const std::exception& err) {
      throw LocatedError(e.loc, err.what());
    }
  }

  void eval_args(const CallArgs& call, Args& args, Kwargs& kwargs) {
    for (const auto& a : call.positional) args.push_back(eval(*a));
    for (const auto& [k, v] : call.keyword) kwargs.emplace_back(k, eval(*v));
  }

  Value eval_impl(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::GetAttr:
        return get_attr(eval(*e.a), e.name);
      case Expr::Kind::GetItem:
        return get_item(eval(*e.a), eval(*e.b));
      case Expr::Kind::Slice: {
        const Value target = eval(*e.a);
        const auto part = [&](const ExprPtr& p) { return p ? eval(*p) : Value(); };
        return built(slice(target, part(e.b), part(e.c), part(e.d)));
      }
      case Expr::Kind::Call:
        return built(eval_call(e));
      case Expr::Kind::Filter: {
        const Value input = eval(*e.a);
        Args args;
        Kwargs kwargs;
        eval_args(e.args, args, kwargs);
        Value out = apply_filter(e.name, input, args, kwargs);
        // A filter that hands back its input (default, safe, first, ...) built nothing.
        if (out.is_data() && input.is_data() && &out.json() == &input.json()) return out;
        return built(std::move(out));
      }
      case Expr::Kind::Test: {
        const Value input = eval(*e.a);
        Args args;
        Kwargs kwargs;
        eval_args(e.args, args, kwargs);
        return Value(Json(apply_test(e.name, input, args) != e.negated));
      }
      case Expr::Kind::Not:
        return Value(Json(!truthy(eval(*e.a))));
      case Expr::Kind::Neg: {
        const Value v = eval(*e.a);
        return arithmetic("-", Value(Json(0)), v);
      }
      case Expr::Kind::Binary:
        return eval_binary(e);
      case Expr::Kind::Concat: {
        std::string out;
        for (const auto& item : e.items) {
          out += to_str(eval(*item));
          sandbox::check_string_bytes(out.size());
        }
        sandbox::charge_bytes(out.size());
        return Value(Json(std::move(out)));
      }
      case Expr::Kind::Compare:
        return eval_compare(e);
      case Expr::Kind::Cond:
        if (truthy(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined("conditional expression");
      case Expr::Kind::List: {
        Json out = Json::array();
        for (const auto& item : e.items) out.push_back(to_data(eval(*item)));
        Value list = built(Value(std::move(out)));
        if (e.name == "tuple") list.mark_tuple();
        return list;
      }
      case Expr::Kind::Dict: {
        Json out = Json::object();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          if (!key.is_string()) fail("dict keys must be strings in chat templates");
          out[key.str()] = to_data(eval(*e.items[i + 1]));
        }
        return built(Value(std::move(out)));
      }
    }
    fail("unknown expression");
  }

  Value eval_call(const Expr& e) {
    Args args;
    Kwargs kwargs;
    if (e.a->kind == Expr::Kind::GetAttr) {
      const Value object = eval(*e.a->a);
      eval_args(e.args, args, kwargs);
      return call_method(object, e.a->name, args, kwargs);
    }
    const Value callee = lookup(e.a->name);
    eval_args(e.args, args, kwargs);
    if (callee.kind() == Value::Kind::Callable) return callee.fn()->fn(args, kwargs);
    return call_global(e.a->name, args, kwargs);
  }

  Value eval_binary(const Expr& e) {
    if (e.name == "and") {
      Value a = eval(*e.a);
      return truthy(a) ? eval(*e.b) : a;
    }
    if (e.name == "or") {
      Value a = eval(*e.a);
      return truthy(a) ? a : eval(*e.b);
    }
    const Value a = eval(*e.a);
    const Value b = eval(*e.b);
    return built(arithmetic(e.name, a, b));
  }

  Value eval_compare(const Expr& e) {
    Value left = eval(*e.items[0]);
    for (size_t i = 0; i < e.compare_ops.size(); ++i) {
      const std::string& op = e.compare_ops[i];
      Value right = eval(*e.items[i + 1]);
      bool ok;
      if (op == "==")
        ok = equals(left, right);
      else if (op == "!=")
        ok = !equals(left, right);
      else if (op == "in")
        ok = contains(right, left);
      else if (op == "notin")
        ok = !contains(right, left);
      else {
        require_defined(left);
        require_defined(right);
        const int c = py_compare(left, right);
        ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
      }
      if (!ok) return Value(Json(false));
      left = std::move(right);
    }
    return Value(Json(true));
  }

  std::vector<std::map<std::string, Value>> scopes_;
  // What this render has used of the sandbox limits.
  int depth_ = 0;               // exec()/eval() levels in progress
  int calls_ = 0;               // macro calls in progress
  sandbox::WorkBudget budget_;  // installed for this thread while the render runs
  size_t written_ = 0;          // bytes of text written so far, captures included
};

}  // namespace

std::string render(const Body& program, const std::map<std::string, Value>& variables) {
  return Interpreter(variables).run(program);
}

}  // namespace kubetune::text::jinja
