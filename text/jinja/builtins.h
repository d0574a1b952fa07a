// Filters, tests, global functions and methods (str/dict/list) available to templates.
#pragma once

#include <string>

#include "text/jinja/value.h"

namespace kubetune::text::jinja {

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
bool is_known_global(const std::string& name);
bool is_known_method(const std::string& name);

// Each throws std::runtime_error (without location; the interpreter adds it) on bad arguments.
Value apply_filter(const std::string& name, const Value& input, const Args& args,
                   const Kwargs& kwargs);
bool apply_test(const std::string& name, const Value& input, const Args& args);
Value call_method(const Value& object, const std::string& name, const Args& args,
                  const Kwargs& kwargs);
Value call_global(const std::string& name, const Args& args, const Kwargs& kwargs);

// Python-style helpers shared with the interpreter.
Value get_item(const Value& object, const Value& key);         // a[b], undefined when missing
Value get_attr(const Value& object, const std::string& name);  // a.b
std::vector<Value> iterate(const Value& v);                    // for-loop items (dict -> keys)
int64_t py_len(const Value& v);
// Python ordering (numbers, strings, lists); throws for other combinations.
int py_compare(const Value& a, const Value& b, bool case_sensitive = true);
Value slice(const Value& v, const Value& start, const Value& stop, const Value& step);

}  // namespace kubetune::text::jinja
