// The limits that keep a hostile chat template (one downloaded with a model) from crashing the
// trainer (stack overflow, memory exhaustion) or hanging it. All of them live here.
//
// Where Python's jinja2 sandbox (ImmutableSandboxedEnvironment, which transformers renders chat
// templates in) has a rule we follow it; elsewhere the numbers are far above what real templates
// need, even for a conversation of 10,000 messages. Exceeding a limit throws std::runtime_error,
// which the interpreter and parser prefix with the template line and column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kubetune::text::jinja::sandbox {

// jinja2.sandbox.MAX_RANGE, with jinja2's message.
inline constexpr int64_t kMaxRange = 100000;
inline const char* const kRangeTooBig =
    "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).";

// ---- parsing ----
// Parsing, rendering and freeing a template each recurse once per level of nesting, so nesting
// is bounded at parse time (jinja2 hits Python's recursion limit at around 100 levels).
// Blocks inside blocks plus brackets and unary operators inside an expression, at one point.
inline constexpr int kMaxNesting = 256;
// Height of one expression tree: chains like `a + b + c` or `x | f | g` add a level per operator
// although nothing is nested in the source (jinja2 takes `+` chains up to about 490 long).
inline constexpr int kMaxExpressionHeight = 512;

// ---- rendering ----
// Macro calls in progress at once: a self-calling macro stops here with a clear error.
// jinja2 fails at about 1000 Python frames; real templates nest a handful of calls.
inline constexpr int kMaxCallDepth = 256;
// Statements and expressions being evaluated at once, macro bodies included. Each level costs a
// few C++ stack frames: under 1 MiB in all at this depth in an optimized build. Without macros,
// the parse-time limits keep a template below about 770.
inline constexpr int kMaxEvalDepth = 1000;
// Loop iterations (items a loop filter looks at count too) plus macro calls in one render: about
// a second of work. A real template spends a few per message. The work within one step is bounded
// by the value limits below, not counted.
inline constexpr int64_t kMaxSteps = 1000000;
// Bytes of text one render may write, counting what macros and {% set %} blocks capture.
inline constexpr size_t kMaxOutputBytes = size_t{64} << 20;
// One value built by the template (a string, or a list/dict with everything inside it).
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;  // of text
inline constexpr size_t kMaxValueNodes = 1000000;           // JSON values, containers included
inline constexpr int kMaxValueDepth = 256;                  // printing and comparing recurse

// For code that builds a string piece by piece: call with its size so far (or the size it is
// about to reach) to stop before memory runs out.
inline void check_string_bytes(size_t bytes) {
  if (bytes > kMaxValueBytes) {
    throw std::runtime_error("text longer than " + std::to_string(kMaxValueBytes) +
                             " bytes (template sandbox limit)");
  }
}

}  // namespace kubetune::text::jinja::sandbox
