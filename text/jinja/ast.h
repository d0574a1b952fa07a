// Syntax tree of a parsed chat template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace kubetune::text::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Location {
  int line = 0, column = 0;
};

struct CallArgs {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    GetAttr,  // a.name
    GetItem,  // a[b]
    Slice,    // a[b:c:d] (children may be null)
    Call,     // a(args)
    Filter,   // a | name(args)
    Test,     // a is [not] name(args)
    Not,      // not a
    Neg,      // -a
    Binary,   // a op b  (op in name: or and + - * / // % **)
    Concat,   // items[0] ~ items[1] ~ ... (flat, like jinja2's Concat)
    Compare,  // a op1 b op2 c ...  (ops in compare_ops)
    Cond,     // b if a else c
    List,     // [items]
    Dict,     // {k: v}
  };
  Kind kind;
  Location loc;
  Value value;
  std::string name;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> items;  // List items, Dict keys/values interleaved, Compare operands
  std::vector<std::string> compare_ops;
  CallArgs args;
  bool negated = false;  // for Test
  int height = 1;        // levels in this subtree; the parser bounds it (sandbox.h)
};

struct Stmt {
  enum class Kind {
    Text,      // text
    Output,    // {{ expr }}
    If,        // branches: conds[i] -> bodies[i]; else_body
    For,       // targets in expr [if filter]: body; else_body
    Set,       // targets (or target.attr) = expr
    SetBlock,  // {% set name %}body{% endset %}
    Macro,     // name(params) body
    Break,
    Continue,
    Generation,  // {% generation %} body (transformers' assistant-mask marker; renders body)
  };
  Kind kind;
  Location loc;
  std::string text;                  // Text, Macro/SetBlock name
  ExprPtr expr;                      // Output, For iterable, Set value
  ExprPtr filter;                    // For ... if filter
  std::vector<std::string> targets;  // For/Set names
  std::string attr;                  // Set ns.attr
  std::vector<ExprPtr> conds;        // If
  std::vector<Body> bodies;          // If branches
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro (default may be null)
};

}  // namespace kubetune::text::jinja
