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
// The work budget of one render, in steps: a loop iteration or macro call is one step (items a
// loop filter looks at count too); so is the work filters, tests and operators do on
// kItemsPerStep items (an `in` test, unique, sort, join, a list built or sliced, ...) or on
// kBytesPerStep bytes of text (searching, replacing, splitting, concatenating). About a second of
// work in all. A real template spends a few steps per message.
inline constexpr int64_t kMaxSteps = 1000000;
inline constexpr int64_t kItemsPerStep = 16;
inline constexpr int64_t kBytesPerStep = 4096;
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

// The budget of the render in progress on this thread, in units of one item (a step is
// kItemsPerStep units). Builtins charge it through charge_items()/charge_bytes(); outside a
// render (no budget installed) the charges are free.
class WorkBudget {
 public:
  static constexpr int64_t kMaxUnits = kMaxSteps * kItemsPerStep;

  // Installs this budget for the current thread until destroyed.
  WorkBudget() : previous_(current()) { current() = this; }
  ~WorkBudget() { current() = previous_; }
  WorkBudget(const WorkBudget&) = delete;
  WorkBudget& operator=(const WorkBudget&) = delete;

  void charge(uint64_t units) {
    used_ = units > kMaxUnits ? kMaxUnits + 1 : used_ + static_cast<int64_t>(units);
    if (used_ > kMaxUnits) {
      throw std::runtime_error("template ran more than " + std::to_string(kMaxSteps) +
                               " loop iterations and macro calls, or as much work in filters, "
                               "tests and operators (template sandbox limit)");
    }
  }
  static WorkBudget*& current() {
    static thread_local WorkBudget* budget = nullptr;
    return budget;
  }

 private:
  WorkBudget* previous_;
  int64_t used_ = 0;
};

inline void charge_units(uint64_t units) {
  if (WorkBudget* budget = WorkBudget::current()) budget->charge(units);
}
inline void charge_steps(uint64_t steps) {
  charge_units(steps > static_cast<uint64_t>(WorkBudget::kMaxUnits)
                   ? steps
                   : steps * static_cast<uint64_t>(kItemsPerStep));
}
inline void charge_items(uint64_t items) { charge_units(items); }
inline void charge_bytes(uint64_t bytes) { charge_units(bytes / (kBytesPerStep / kItemsPerStep)); }
// Searching `needle` in `haystack` (std::string::find compares up to the needle's length at each
// position, so a long needle costs more than one pass over the text).
inline void charge_search(size_t haystack, size_t needle) {
  const uint64_t passes = needle / 64 + 1;
  const uint64_t h = haystack;
  charge_bytes(h != 0 && passes > UINT64_MAX / h ? UINT64_MAX : h * passes);
}

}  // namespace kubetune::text::jinja::sandbox
