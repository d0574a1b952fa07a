// Executes a parsed template against variables, producing the rendered text.
#pragma once

#include <map>
#include <string>

#include "text/jinja/ast.h"

namespace kubetune::text::jinja {

// Throws std::runtime_error("line L, column C: ...") for evaluation errors and TemplateRaised for
// raise_exception().
std::string render(const Body& program, const std::map<std::string, Value>& variables);

}  // namespace kubetune::text::jinja
