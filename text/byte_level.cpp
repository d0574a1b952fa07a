#include "text/byte_level.h"

#include <unordered_map>

#include "text/utf8.h"

namespace kubetune::text::byte_level {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;
  std::unordered_map<char32_t, unsigned char> to_byte;

  Tables() {
    // Printable Latin-1 bytes map to themselves; the rest are shifted to 256+ in byte order.
    std::array<bool, 256> printable{};
    for (int b = '!'; b <= '~'; ++b) printable[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = printable[b] ? static_cast<char32_t>(b) : next++;
      to_char[b] = utf8::encode(cp);
      to_byte[cp] = static_cast<unsigned char>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_to_char(unsigned char b) { return tables().to_char[b]; }

std::optional<unsigned char> char_to_byte(char32_t cp) {
  const auto& m = tables().to_byte;
  const auto it = m.find(cp);
  if (it == m.end()) return std::nullopt;
  return it->second;
}

}  // namespace kubetune::text::byte_level
