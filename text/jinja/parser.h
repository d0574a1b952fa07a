// Recursive-descent parser for the Jinja subset used by chat templates. Anything outside that
// subset (unknown tags, filters, tests, functions, methods) is rejected here, at load time, with
// its line and column, so a template never renders a silently wrong prompt.
#pragma once

#include <string>

#include "text/jinja/ast.h"

namespace kubetune::text::jinja {

// Throws std::runtime_error("line L, column C: ...").
Body parse(const std::string& source);

}  // namespace kubetune::text::jinja
