// JSON parsing for files users hand us (config.json, tokenizer.json, dataset lines, checkpoint
// state, safetensors headers). nlohmann's parser lets a repeated key silently win and accepts any
// depth; Python's json does the same, but a duplicated key in a hand-edited file is nearly always
// a mistake, and our readers of nested structures (normalizers, templates) recurse. So both are
// refused here, with the key's path or the depth in the message.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace kubetune {

// Deeper than any file we read legitimately (tokenizer.json nests < 10), far below stack limits.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`; throws std::runtime_error "<source>: ..." on a syntax error (with nlohmann's line
// and column), a duplicated object key (naming its path, e.g. /model/vocab/"ab"), or nesting deeper
// than kMaxJsonDepth.
nlohmann::json parse_json_strict(std::string_view text, const std::string& source);

// Reads and parses a whole file the same way; "<path>: cannot open" if it cannot be read.
nlohmann::json read_json_file_strict(const std::string& path);

// nlohmann's messages start with "[json.exception.parse_error.101] "; users do not need that.
std::string without_json_exception_tag(const std::string& what);

}  // namespace kubetune
