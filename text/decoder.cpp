#include "text/decoder.h"

#include <optional>
#include <stdexcept>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace kubetune::text {
namespace {

const std::string kReplacementChar = "\xEF\xBF\xBD";

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mapped;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        const auto b = byte_level::char_to_byte(utf8::decode(t, i));
        if (b) mapped.push_back(static_cast<char>(*b));
        ok = b.has_value();
      }
      // Tokens with characters outside the byte mapping (e.g. added tokens) pass through as-is.
      bytes += ok ? mapped : t;
    }
    return {utf8_lossy(bytes)};
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::string out;
      size_t prev = 0;
      for (size_t pos; !from_.empty() && (pos = t.find(from_, prev)) != std::string::npos;
           prev = pos + from_.size()) {
        out.append(t, prev, pos - prev);
        out += to_;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  std::string from_, to_;
};

// <0xNN> tokens -> raw bytes; each run must be valid UTF-8, else every byte becomes U+FFFD.
class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_count = 0;
    auto flush = [&] {
      if (pending_count == 0) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending_count; ++i) out.push_back(kReplacementChar);
      }
      pending.clear();
      pending_count = 0;
    };
    for (auto& t : tokens) {
      if (const auto b = parse_byte(t)) {
        pending.push_back(static_cast<char>(*b));
        ++pending_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }

 private:
  static std::optional<unsigned char> parse_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
    unsigned v = 0;
    for (size_t i = 3; i < 5; ++i) {
      const char c = t[i];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<unsigned>(c - '0');
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<unsigned>(c - 'A' + 10);
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<unsigned>(c - 'a' + 10);
      else
        return std::nullopt;
    }
    return static_cast<unsigned char>(v);
  }
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0;
           k < start_ && t.compare(b, content_.size(), content_) == 0 && b + content_.size() <= e;
           ++k) {
        b += content_.size();
      }
      for (size_t k = 0; k < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
    return tokens;
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          // HF drops every replacement of the first token (not only a leading one).
          if (!(i == 0 && strip_first_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::string utf8_lossy(const std::string& bytes) {
  if (utf8::is_valid(bytes)) return bytes;
  // Each maximal invalid subpart becomes one U+FFFD (Unicode's recommended practice, as in Rust).
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto lead = static_cast<unsigned char>(bytes[i]);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
    if (lead < 0x80) {
      out.push_back(static_cast<char>(lead));
      ++i;
      continue;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      need = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 2;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 3;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    size_t j = i + 1;
    size_t got = 0;
    while (got < need && j < bytes.size()) {
      const auto c = static_cast<unsigned char>(bytes[j]);
      const bool ok = got == 0 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
      if (!ok) break;
      ++got;
      ++j;
    }
    if (need > 0 && got == need) {
      out.append(bytes, i, j - i);
    } else {
      out += kReplacementChar;
    }
    i = j;
  }
  return out;
}

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(config.at("content").get<std::string>(),
                                          config.value("start", 0), config.value("stop", 0));
  }
  if (type == "Replace") {
    const auto& p = config.at("pattern");
    if (!p.contains("String"))
      throw std::runtime_error(where + ".pattern: only {\"String\": ...} is supported");
    return std::make_unique<ReplaceDecoder>(p["String"].get<std::string>(),
                                            config.at("content").get<std::string>());
  }
  if (type == "Metaspace") {
    std::string scheme = config.value("prepend_scheme", "");
    if (scheme.empty()) scheme = config.value("add_prefix_space", true) ? "always" : "never";
    return std::make_unique<MetaspaceDecoder>(config.value("replacement", "\xE2\x96\x81"),
                                              scheme != "never");
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    const auto& list = config.at("decoders");
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_decoder(list[i], where + ".decoders[" + std::to_string(i) + "]");
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  throw std::runtime_error(where + ": unsupported decoder type '" + type + "'");
}

}  // namespace kubetune::text
