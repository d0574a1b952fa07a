// PCRE2 wrapper used for HF's Split/ByteLevel patterns. HF compiles these patterns with Oniguruma;
// PCRE2 in UTF + UCP mode agrees with it on the patterns tokenizers ship (\p{L}, \p{N}, \s+(?!\S)).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubetune::text {

class Regex {
 public:
  // Throws std::runtime_error naming `what` (e.g. the tokenizer.json field) if `pattern` is
  // invalid.
  Regex(const std::string& pattern, const std::string& what);
  // All non-overlapping matches, as byte ranges, scanning left to right like Oniguruma's find_iter.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

// Escapes regex metacharacters so a literal string can be matched (HF's SplitPattern::String).
std::string regex_escape(std::string_view literal);

}  // namespace kubetune::text
