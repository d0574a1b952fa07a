#include "common/metrics/names.h"

#include <stdexcept>

namespace kubetune::metrics {
namespace {

bool is_letter_or_underscore(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Number of continuation bytes announced by a UTF-8 lead byte, or -1 if it is not a lead byte.
int utf8_continuations(unsigned char lead) {
  if (lead < 0x80) return 0;
  if (lead >= 0xC2 && lead <= 0xDF) return 1;
  if (lead >= 0xE0 && lead <= 0xEF) return 2;
  if (lead >= 0xF0 && lead <= 0xF4) return 3;
  return -1;  // continuation byte, overlong 2-byte lead (C0/C1) or beyond U+10FFFF
}

}  // namespace

bool is_valid_metric_name(const std::string& name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = is_letter_or_underscore(c) || c == ':' || (i > 0 && is_digit(c));
    if (!ok) return false;
  }
  return true;
}

bool is_valid_label_name(const std::string& name) {
  if (name.empty() || name.rfind("__", 0) == 0) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!(is_letter_or_underscore(c) || (i > 0 && is_digit(c)))) return false;
  }
  return true;
}

void check_metric_name(const std::string& name) {
  if (!is_valid_metric_name(name)) {
    throw std::invalid_argument("invalid metric name \"" + name +
                                "\": must match [a-zA-Z_:][a-zA-Z0-9_:]*");
  }
}

void check_label_name(const std::string& name) {
  if (!is_valid_label_name(name)) {
    throw std::invalid_argument("invalid label name \"" + name +
                                "\": must match [a-zA-Z_][a-zA-Z0-9_]* and not start with \"__\"");
  }
}

void check_utf8(const std::string& text, const std::string& what) {
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const int extra = utf8_continuations(lead);
    bool ok = extra >= 0 && i + static_cast<std::size_t>(extra) < text.size();
    for (int k = 1; ok && k <= extra; ++k) {
      ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    // Reject overlong 3/4-byte forms, UTF-16 surrogates and code points above U+10FFFF.
    if (ok && extra >= 2) {
      const auto second = static_cast<unsigned char>(text[i + 1]);
      if ((lead == 0xE0 && second < 0xA0) || (lead == 0xED && second > 0x9F) ||
          (lead == 0xF0 && second < 0x90) || (lead == 0xF4 && second > 0x8F)) {
        ok = false;
      }
    }
    if (!ok) {
      throw std::invalid_argument(what + ": invalid UTF-8 at byte " + std::to_string(i));
    }
    i += 1 + static_cast<std::size_t>(extra);
  }
}

}  // namespace kubetune::metrics
