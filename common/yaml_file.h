// YAML (and JSON, which is YAML) files users hand us, read into JSON. Beyond what yaml-cpp checks,
// a file is refused, naming its line, when it holds a repeated key (YAML says keys are unique;
// yaml-cpp keeps both), more than one non-empty document (the rest would be ignored), aliases that
// expand into more than kMaxYamlNodes nodes ("billion laughs": a few lines that expand to 10^10
// nodes), or nesting deeper than kMaxYamlDepth (an anchor containing its own alias).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune {

// A FineTuneJob or training config has a few hundred nodes; this is room for any real one.
inline constexpr long kMaxYamlNodes = 1000000;
// Far deeper than any manifest; stops an anchor that contains its own alias before the stack does.
inline constexpr int kMaxYamlDepth = 128;

nlohmann::json yaml_to_json(const std::string& text, const std::string& source_name);

// Errors name the file and line.
nlohmann::json load_yaml_or_json_file(const std::string& path);

}  // namespace kubetune
