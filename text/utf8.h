// Small UTF-8 helpers shared by the tokenizer and the template engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kubetune::text::utf8 {

// Length in bytes of the UTF-8 sequence that starts with byte `lead` (1 for invalid lead bytes, so
// callers always make progress).
inline size_t sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

// Decodes the code point at `pos` and advances `pos` past it. Invalid bytes decode as themselves.
char32_t decode(std::string_view s, size_t& pos);

// Appends the UTF-8 encoding of `cp` to `out`.
void append(std::string& out, char32_t cp);

inline std::string encode(char32_t cp) {
  std::string out;
  append(out, cp);
  return out;
}

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or truncated sequences).
bool is_valid(std::string_view s);

// Number of code points in `s`.
size_t length(std::string_view s);

// Unicode White_Space property (what Python's str.isspace and Rust's char::is_whitespace use).
bool is_whitespace(char32_t cp);

}  // namespace kubetune::text::utf8
