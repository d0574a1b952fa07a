#include "trainer/text/jinja/interpreter.h"

#include <cmath>
#include <stdexcept>

#include "trainer/text/jinja/builtins.h"
#include "trainer/text/jinja/errors.h"

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

Value repeat(const Value& seq, int64_t n) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(Json(out));
  }
  Json out = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    for (const auto& e : seq.json()) out.push_back(e);
  }
  return Value(out);
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
  if (ints) {
    const int64_t x = to_int(a), y = to_int(b);
    if (op == "+") return Value(Json(x + y));
    if (op == "-") return Value(Json(x - y));
    if (op == "*") return Value(Json(x * y));
    if (op == "//" || op == "%") {
      if (y == 0) fail("integer division or modulo by zero");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
        --q;
        r += y;
      }
      return Value(Json(op == "//" ? q : r));
    }
    if (op == "**") {
      if (y < 0) return Value(Json(std::pow(static_cast<double>(x), static_cast<double>(y))));
      int64_t result = 1;
      for (int64_t i = 0; i < y; ++i) result *= x;
      return Value(Json(result));
    }
  }
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
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.json().contains(item.str());
  if (container.kind() == Value::Kind::Namespace)
    return item.is_string() && container.ns()->attrs.count(item.str());
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

  Flow exec(const Stmt& s, std::string& out) {
    try {
      return exec_impl(s, out);
    } catch (const LocatedError&) {
      throw;
    } catch (const TemplateRaised&) {
      throw;
    } catch (const std::runtime_error& e) {
      throw LocatedError(s.loc, e.what());
    }
  }

  Flow exec_impl(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        out += s.text;
        return Flow::Normal;
      case Stmt::Kind::Output:
        out += to_str(eval(*s.expr));
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
    for (int64_t i = 0; i < n; ++i) {
      Json loop = {
          {"index", i + 1},  {"index0", i},        {"revindex", n - i}, {"revindex0", n - i - 1},
          {"first", i == 0}, {"last", i == n - 1}, {"length", n},       {"depth", 1},
          {"depth0", 0}};
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
      return eval_impl(e);
    } catch (const LocatedError&) {
      throw;
    } catch (const TemplateRaised&) {
      throw;
    } catch (const std::runtime_error& err) {
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
        return slice(target, part(e.b), part(e.c), part(e.d));
      }
      case Expr::Kind::Call:
        return eval_call(e);
      case Expr::Kind::Filter: {
        const Value input = eval(*e.a);
        Args args;
        Kwargs kwargs;
        eval_args(e.args, args, kwargs);
        return apply_filter(e.name, input, args, kwargs);
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
      case Expr::Kind::Compare:
        return eval_compare(e);
      case Expr::Kind::Cond:
        if (truthy(eval(*e.a))) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined("conditional expression");
      case Expr::Kind::List: {
        Json out = Json::array();
        for (const auto& item : e.items) out.push_back(to_data(eval(*item)));
        Value list(std::move(out));
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
        return Value(out);
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
    if (e.name == "~") return Value(Json(to_str(a) + to_str(b)));
    return arithmetic(e.name, a, b);
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
};

}  // namespace

std::string render(const Body& program, const std::map<std::string, Value>& variables) {
  return Interpreter(variables).run(program);
}

}  // namespace kubetune::text::jinja
