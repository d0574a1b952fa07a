// A piece of text being transformed by normalizers and pre-tokenizers, remembering where every byte
// came from in the caller's original string, so that token offsets can point back into it.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace kubetune::text {

using Range = std::pair<size_t, size_t>;  // [begin, end) byte offsets into the original input

struct Normalized {
  std::string text;
  // align[i] is the original range of the character that produced byte i of `text`. Like HF's
  // NormalizedString, every byte of a character carries the whole character's range.
  std::vector<Range> align;

  // Text copied from the original input starting at byte `base`.
  static Normalized from_original(std::string_view original, size_t base);

  bool empty() const { return text.empty(); }
  // Original range covered by normalized bytes [begin, end); (x, x) for an empty range.
  Range original_range(size_t begin, size_t end) const;
  Normalized slice(size_t begin, size_t end) const;
};

}  // namespace kubetune::text
