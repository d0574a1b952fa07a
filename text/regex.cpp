#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdexcept>

namespace kubetune::text {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(const std::string& pattern, const std::string& what) {
  auto impl = std::make_shared<Impl>();
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (impl->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw std::runtime_error(what + ": invalid regex at offset " + std::to_string(error_offset) +
                             ": " + reinterpret_cast<const char*>(message));
  }
  // JIT is an optimisation only: fall back to the interpreter when the platform lacks it.
  impl->jit = pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE) == 0;
  impl_ = impl;
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> matches;
  // Match data is per call so one Regex can be shared by threads encoding concurrently.
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    const int rc = impl_->jit
                       ? pcre2_jit_match(impl_->code, text, subject.size(), start, 0, data, nullptr)
                       : pcre2_match(impl_->code, text, subject.size(), start, 0, data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      throw std::runtime_error("regex match failed (code " + std::to_string(rc) +
                               "); is the input valid UTF-8?");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match: skip one character so the scan always progresses (empty matches produce no
      // token).
      if (b >= subject.size()) break;
      size_t next = b + 1;
      while (next < subject.size() && (static_cast<unsigned char>(subject[next]) & 0xC0) == 0x80)
        ++next;
      start = next;
      continue;
    }
    matches.emplace_back(b, e);
    start = e;
  }
  pcre2_match_data_free(data);
  return matches;
}

std::string regex_escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/").find(c) != std::string_view::npos)
      out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace kubetune::text
