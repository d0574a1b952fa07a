#include "text/normalized.h"

#include "text/utf8.h"

namespace kubetune::text {

Normalized Normalized::from_original(std::string_view original, size_t base) {
  Normalized n;
  n.text = std::string(original);
  n.align.reserve(original.size());
  for (size_t i = 0; i < original.size();) {
    const size_t len = utf8::sequence_length(static_cast<unsigned char>(original[i]));
    const size_t end = std::min(i + len, original.size());
    for (size_t k = i; k < end; ++k) n.align.emplace_back(base + i, base + end);
    i = end;
  }
  return n;
}

Range Normalized::original_range(size_t begin, size_t end) const {
  if (begin >= end || align.empty()) {
    const size_t at =
        begin < align.size() ? align[begin].first : (align.empty() ? 0 : align.back().second);
    return {at, at};
  }
  return {align[begin].first, align[end - 1].second};
}

Normalized Normalized::slice(size_t begin, size_t end) const {
  Normalized n;
  n.text = text.substr(begin, end - begin);
  n.align.assign(align.begin() + static_cast<std::ptrdiff_t>(begin),
                 align.begin() + static_cast<std::ptrdiff_t>(end));
  return n;
}

}  // namespace kubetune::text
