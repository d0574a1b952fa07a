// Splits a Jinja template into text and tag tokens, applying whitespace control the way
// transformers configures Jinja: trim_blocks=True, lstrip_blocks=True, plus {%- -%} / {%+ +%}.
#pragma once

#include <string>
#include <vector>

namespace kubetune::text::jinja {

struct Token {
  enum class Type {
    Text,        // literal template text (already whitespace-controlled)
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,
    String,  // value is the unescaped string
    Integer,
    Float,
    Operator,  // value is the operator text: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } , . :
               // |
    End,
  };
  Type type;
  std::string value;
  int line = 1, column = 1;
};

// Throws std::runtime_error("line L, column C: ...") on lexical errors.
std::vector<Token> tokenize(const std::string& source);

}  // namespace kubetune::text::jinja
