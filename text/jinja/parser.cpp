#include "text/jinja/parser.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>
#include <stdexcept>

#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/sandbox.h"

namespace kubetune::text::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_template() {
    std::string ended;
    Body body = parse_body({}, ended);
    check_calls(body);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[p_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(p_ + n, toks_.size() - 1)]; }
  Location loc() const { return {cur().line, cur().column}; }
  [[noreturn]] void fail(const std::string& what) const { fail_at(loc(), what); }
  [[noreturn]] static void fail_at(Location l, const std::string& what) {
    throw std::runtime_error("line " + std::to_string(l.line) + ", column " +
                             std::to_string(l.column) + ": " + what);
  }
  bool is_op(const char* op) const { return cur().type == T::Operator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == T::Name && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++p_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != T::Name) fail("expected a name, got " + describe(cur()));
    return toks_[p_++].value;
  }
  void expect_block_end() {
    if (cur().type != T::BlockEnd) fail("expected '%}', got " + describe(cur()));
    ++p_;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::End:
        return "end of template";
      case T::BlockEnd:
        return "'%}'";
      case T::VarEnd:
        return "'}}'";
      case T::String:
        return "string literal";
      default:
        return "'" + t.value + "'";
    }
  }

  // ---- nesting limits (sandbox.h) ----
  // One level of source nesting (a block, a bracketed or unary sub-expression) for as long as it
  // lives. The parser recurses once per level, so hostile nesting fails here, not on the stack.
  class Nested {
   public:
    explicit Nested(Parser& parser) : parser_(parser) {
      if (parser_.nesting_ == sandbox::kMaxNesting) {
        parser_.fail("nesting deeper than " + std::to_string(sandbox::kMaxNesting) +
                     " levels (blocks, brackets and unary operators)");
      }
      ++parser_.nesting_;
    }
    ~Nested() { --parser_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& parser_;
  };

  // Records the height of a finished expression node (its children are complete) and bounds it:
  // rendering and freeing an expression recurse once per level, and operator chains such as
  // `a + b + c + ...` grow the tree without any nesting in the source.
  ExprPtr sealed(ExprPtr e) {
    int below = 0;
    const auto see = [&below](const ExprPtr& child) {
      if (child) below = std::max(below, child->height);
    };
    for (const ExprPtr* child : {&e->a, &e->b, &e->c, &e->d}) see(*child);
    for (const auto& item : e->items) see(item);
    for (const auto& arg : e->args.positional) see(arg);
    for (const auto& kv : e->args.keyword) see(kv.second);
    e->height = below + 1;
    if (e->height > sandbox::kMaxExpressionHeight) {
      fail("expression nested deeper than " + std::to_string(sandbox::kMaxExpressionHeight) +
           " levels (operators, filters, attribute lookups)");
    }
    return e;
  }

  // ---- statements ----
  // Parses statements until one of `end_tags` (e.g. "endif") opens a block tag; `ended` receives
  // that tag name, with the parser positioned just after it.
  Body parse_body(const std::set<std::string>& end_tags, std::string& ended) {
    const Nested nested(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == T::End) {
        if (!end_tags.empty()) {
          std::string closing = *end_tags.begin();
          for (const auto& tag : end_tags) {
            if (tag.rfind("end", 0) == 0) closing = tag;
          }
          fail("unexpected end of template, expected '" + closing + "'");
        }
        return body;
      }
      if (t.type == T::Text) {
        auto s = make_stmt(Stmt::Kind::Text);
        s->text = t.value;
        ++p_;
        body.push_back(std::move(s));
      } else if (t.type == T::VarBegin) {
        ++p_;
        auto s = make_stmt(Stmt::Kind::Output);
        s->expr = parse_expression();
        if (cur().type != T::VarEnd) fail("expected '}}', got " + describe(cur()));
        ++p_;
        body.push_back(std::move(s));
      } else if (t.type == T::BlockBegin) {
        ++p_;
        if (cur().type != T::Name) fail("expected a tag name after '{%'");
        const std::string tag = cur().value;
        if (end_tags.count(tag)) {
          ++p_;
          ended = tag;
          return body;
        }
        body.push_back(parse_statement(tag));
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr make_stmt(Stmt::Kind kind) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->loc = loc();
    return s;
  }

  StmtPtr parse_statement(const std::string& tag) {
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "break" || tag == "continue") {
      auto s = make_stmt(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue);
      ++p_;
      expect_block_end();
      return s;
    }
    if (tag == "generation") {
      auto s = make_stmt(Stmt::Kind::Generation);
      ++p_;
      expect_block_end();
      std::string ended;
      s->body = parse_body({"endgeneration"}, ended);
      expect_block_end();
      return s;
    }
    if (tag.rfind("end", 0) == 0 || tag == "elif" || tag == "else")
      fail("unexpected '" + tag + "'");
    fail("unsupported tag '" + tag + "'");
  }

  StmtPtr parse_if() {
    auto s = make_stmt(Stmt::Kind::If);
    ++p_;  // 'if'
    std::string ended = "elif";
    while (ended == "elif") {
      s->conds.push_back(parse_expression());
      expect_block_end();
      s->bodies.push_back(parse_body({"elif", "else", "endif"}, ended));
    }
    if (ended == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, ended);
    }
    expect_block_end();
    return s;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    do {
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for() {
    auto s = make_stmt(Stmt::Kind::For);
    ++p_;  // 'for'
    s->targets = parse_targets();
    if (!skip_name("in")) fail("expected 'in' in for loop");
    s->expr = parse_expression(/*allow_cond=*/false);
    if (skip_name("if")) s->filter = parse_expression(false);
    if (is_name("recursive")) fail("unsupported construct 'recursive' loops");
    expect_block_end();
    std::string ended;
    s->body = parse_body({"else", "endfor"}, ended);
    if (ended == "else") {
      expect_block_end();
      s->else_body = parse_body({"endfor"}, ended);
    }
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    auto s = make_stmt(Stmt::Kind::Set);
    ++p_;  // 'set'
    const std::string first = expect_name();
    if (skip_op(".")) {
      s->targets = {first};
      s->attr = expect_name();
    } else {
      s->targets = {first};
      while (skip_op(",")) s->targets.push_back(expect_name());
    }
    if (cur().type == T::BlockEnd && s->attr.empty() && s->targets.size() == 1) {
      s->kind = Stmt::Kind::SetBlock;
      s->text = first;
      ++p_;
      std::string ended;
      s->body = parse_body({"endset"}, ended);
      expect_block_end();
      return s;
    }
    expect_op("=");
    s->expr = parse_tuple_or_expression();
    expect_block_end();
    return s;
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(Stmt::Kind::Macro);
    ++p_;  // 'macro'
    s->text = expect_name();
    macros_.insert(s->text);
    expect_op("(");
    while (!is_op(")")) {
      std::string name = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression();
      s->params.emplace_back(std::move(name), std::move(def));
      if (!skip_op(",")) break;
    }
    expect_op(")");
    expect_block_end();
    std::string ended;
    s->body = parse_body({"endmacro"}, ended);
    if (cur().type == T::Name && cur().value == s->text) ++p_;  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  // ---- expressions ----
  ExprPtr make(Expr::Kind kind, Location l) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->loc = l;
    return e;
  }

  // `a, b` at statement level is a tuple (e.g. {% set x = 1, 2 %}).
  ExprPtr parse_tuple_or_expression() {
    const Location l = loc();
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto list = make(Expr::Kind::List, l);
    list->items.push_back(std::move(first));
    while (skip_op(",")) list->items.push_back(parse_expression());
    return sealed(std::move(list));
  }

  ExprPtr parse_expression(bool allow_cond = true) {
    const Nested nested(*this);
    if (!allow_cond) return parse_or();
    const Location l = loc();
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto cond = make(Expr::Kind::Cond, l);
      cond->a = parse_or();
      cond->b = std::move(expr);
      if (skip_name("else")) cond->c = parse_expression();
      expr = sealed(std::move(cond));
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr lhs, ExprPtr rhs, Location l) {
    auto e = make(Expr::Kind::Binary, l);
    e->name = op;
    e->a = std::move(lhs);
    e->b = std::move(rhs);
    return sealed(std::move(e));
  }

  ExprPtr parse_or() {
    const Location l = loc();
    ExprPtr e = parse_and();
    while (skip_name("or")) e = binary("or", std::move(e), parse_and(), l);
    return e;
  }
  ExprPtr parse_and() {
    const Location l = loc();
    ExprPtr e = parse_not();
    while (skip_name("and")) e = binary("and", std::move(e), parse_not(), l);
    return e;
  }
  ExprPtr parse_not() {
    const Location l = loc();
    if (skip_name("not")) {
      const Nested nested(*this);
      auto e = make(Expr::Kind::Not, l);
      e->a = parse_not();
      return sealed(std::move(e));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Location l = loc();
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      std::string op;
      if (cur().type == T::Operator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
           cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = cur().value;
        ++p_;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == T::Name && peek().value == "in") {
        p_ += 2;
        op = "notin";
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(Expr::Kind::Compare, l);
    e->items.push_back(std::move(first));
    for (auto& o : operands) e->items.push_back(std::move(o));
    e->compare_ops = std::move(ops);
    return sealed(std::move(e));
  }
  ExprPtr parse_math1() {
    const Location l = loc();
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = toks_[p_++].value;
      e = binary(op, std::move(e), parse_concat(), l);
    }
    return e;
  }
  // One node for a whole `a ~ b ~ c` chain, as in jinja2: long concatenations stay flat instead
  // of nesting a level per operator.
  ExprPtr parse_concat() {
    const Location l = loc();
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make(Expr::Kind::Concat, l);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return sealed(std::move(e));
  }
  ExprPtr parse_math2() {
    const Location l = loc();
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = toks_[p_++].value;
      e = binary(op, std::move(e), parse_pow(), l);
    }
    return e;
  }
  ExprPtr parse_pow() {
    const Location l = loc();
    ExprPtr e = parse_unary(true);
    while (skip_op("**")) e = binary("**", std::move(e), parse_unary(true), l);
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    const Location l = loc();
    ExprPtr e;
    if (skip_op("-")) {
      const Nested nested(*this);
      e = make(Expr::Kind::Neg, l);
      e->a = parse_unary(false);
      e = sealed(std::move(e));
    } else if (skip_op("+")) {
      const Nested nested(*this);
      e = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Location l = loc();
    const Token& t = cur();
    if (t.type == T::Name) {
      ++p_;
      if (t.value == "true" || t.value == "True") return literal(Json(true), l);
      if (t.value == "false" || t.value == "False") return literal(Json(false), l);
      if (t.value == "none" || t.value == "None") return literal(Json(nullptr), l);
      auto e = make(Expr::Kind::Name, l);
      e->name = t.value;
      return e;
    }
    if (t.type == T::String) {
      std::string s;
      while (cur().type == T::String) s += toks_[p_++].value;  // adjacent literals concatenate
      return literal(Json(s), l);
    }
    if (t.type == T::Integer) {
      ++p_;
      return literal(Json(integer(t)), l);
    }
    if (t.type == T::Float) {
      ++p_;
      return literal(Json(std::strtod(t.value.c_str(), nullptr)), l);  // too big: inf, like Python
    }
    if (skip_op("(")) {
      if (skip_op(")")) {  // empty tuple
        auto empty = make(Expr::Kind::List, l);
        empty->name = "tuple";
        return empty;
      }
      ExprPtr first = parse_expression();
      if (!is_op(",")) {
        expect_op(")");
        return first;
      }
      auto list = make(Expr::Kind::List, l);
      list->name = "tuple";
      list->items.push_back(std::move(first));
      while (skip_op(",")) {
        if (is_op(")")) break;
        list->items.push_back(parse_expression());
      }
      expect_op(")");
      return sealed(std::move(list));
    }
    if (skip_op("[")) {
      auto list = make(Expr::Kind::List, l);
      while (!is_op("]")) {
        list->items.push_back(parse_expression());
        if (!skip_op(",")) break;
      }
      expect_op("]");
      return sealed(std::move(list));
    }
    if (skip_op("{")) {
      auto dict = make(Expr::Kind::Dict, l);
      while (!is_op("}")) {
        dict->items.push_back(parse_expression());
        expect_op(":");
        dict->items.push_back(parse_expression());
        if (!skip_op(",")) break;
      }
      expect_op("}");
      return sealed(std::move(dict));
    }
    fail("unexpected " + describe(t) + " in expression");
  }

  // Python ints are unbounded; ours are 64-bit, so a longer literal is an error, not a wrap.
  int64_t integer(const Token& t) {
    errno = 0;
    const long long n = std::strtoll(t.value.c_str(), nullptr, 10);
    if (errno == ERANGE) fail_at({t.line, t.column}, "integer literal out of range: " + t.value);
    return n;
  }

  ExprPtr literal(Json j, Location l) {
    auto e = make(Expr::Kind::Literal, l);
    e->value = Value(std::move(j));
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Location l = loc();
      if (skip_op(".")) {
        if (cur().type == T::Integer) {
          auto item = make(Expr::Kind::GetItem, l);
          item->a = std::move(e);
          item->b = literal(Json(integer(toks_[p_++])), l);
          e = sealed(std::move(item));
        } else {
          auto attr = make(Expr::Kind::GetAttr, l);
          attr->a = std::move(e);
          attr->name = expect_name();
          e = sealed(std::move(attr));
        }
      } else if (skip_op("[")) {
        e = parse_subscript(std::move(e), l);
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, Location l) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (is_op("]")) break;
      if (skip_op(":")) {
        is_slice = true;
        if (++part > 2) fail("too many ':' in slice");
        continue;
      }
      if (parts[part]) fail("expected ':' or ']' in subscript");
      parts[part] = parse_expression();
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript");
      auto e = make(Expr::Kind::GetItem, l);
      e->a = std::move(target);
      e->b = std::move(parts[0]);
      return sealed(std::move(e));
    }
    auto e = make(Expr::Kind::Slice, l);
    e->a = std::move(target);
    e->b = std::move(parts[0]);
    e->c = std::move(parts[1]);
    e->d = std::move(parts[2]);
    return sealed(std::move(e));
  }

  CallArgs parse_args() {
    CallArgs args;
    expect_op("(");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail("unsupported construct '*args' in call");
      if (cur().type == T::Name && peek().type == T::Operator && peek().value == "=") {
        std::string name = toks_[p_].value;
        p_ += 2;
        args.keyword.emplace_back(std::move(name), parse_expression());
      } else {
        if (!args.keyword.empty()) fail("positional argument after keyword argument");
        args.positional.push_back(parse_expression());
      }
      if (!skip_op(",")) break;
    }
    expect_op(")");
    return args;
  }

  ExprPtr parse_call(ExprPtr callee) {
    const Location l = loc();
    auto e = make(Expr::Kind::Call, l);
    if (callee->kind == Expr::Kind::GetAttr && !is_known_method(callee->name)) {
      fail_at(callee->loc, "unsupported method '" + callee->name + "'");
    }
    if (callee->kind != Expr::Kind::GetAttr && callee->kind != Expr::Kind::Name) {
      fail_at(callee->loc, "unsupported call of a computed value");
    }
    e->a = std::move(callee);
    e->args = parse_args();
    return sealed(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      const Location l = loc();
      if (skip_op("|")) {
        auto f = make(Expr::Kind::Filter, l);
        f->name = expect_name();
        if (!is_known_filter(f->name)) fail_at(l, "unsupported filter '" + f->name + "'");
        if (is_op("(")) f->args = parse_args();
        f->a = std::move(e);
        e = sealed(std::move(f));
      } else if (skip_name("is")) {
        auto t = make(Expr::Kind::Test, l);
        t->negated = skip_name("not");
        t->name = expect_name();
        if (!is_known_test(t->name)) fail_at(l, "unsupported test '" + t->name + "'");
        if (is_op("(")) {
          t->args = parse_args();
        } else if ((cur().type == T::Name && cur().value != "else" && cur().value != "or" &&
                    cur().value != "and" && cur().value != "if" && cur().value != "in" &&
                    cur().value != "not") ||
                   cur().type == T::String || cur().type == T::Integer || cur().type == T::Float ||
                   is_op("[") || is_op("{")) {
          t->args.positional.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(e);
        e = sealed(std::move(t));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  // Calls by name must reach a global function or a macro of this template.
  void check_calls(const Body& body) {
    for (const auto& s : body) check_stmt(*s);
  }
  void check_stmt(const Stmt& s) {
    for (const ExprPtr* e : {&s.expr, &s.filter}) {
      if (*e) check_expr(**e);
    }
    for (const auto& c : s.conds) check_expr(*c);
    for (const auto& b : s.bodies) check_calls(b);
    for (const auto& [name, def] : s.params) {
      if (def) check_expr(*def);
    }
    check_calls(s.body);
    check_calls(s.else_body);
  }
  void check_expr(const Expr& e) {
    if (e.kind == Expr::Kind::Call && e.a->kind == Expr::Kind::Name &&
        !is_known_global(e.a->name) && !macros_.count(e.a->name)) {
      fail_at(e.a->loc, "unsupported function '" + e.a->name + "'");
    }
    for (const ExprPtr* c : {&e.a, &e.b, &e.c, &e.d}) {
      if (*c) check_expr(**c);
    }
    for (const auto& i : e.items) check_expr(*i);
    for (const auto& i : e.args.positional) check_expr(*i);
    for (const auto& [k, v] : e.args.keyword) check_expr(*v);
  }

  std::vector<Token> toks_;
  size_t p_ = 0;
  std::set<std::string> macros_;
  int nesting_ = 0;  // levels held by Nested
};

}  // namespace

Body parse(const std::string& source) { return Parser(tokenize(source)).parse_template(); }

}  // namespace kubetune::text::jinja
