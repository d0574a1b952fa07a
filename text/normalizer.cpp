#include "text/normalizer.h"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "text/regex.h"
#include "text/utf8.h"

namespace kubetune::text {
namespace {

// One output character plus HF's "change" bookkeeping: 0 replaces one original character, +1 is
// inserted (borrows the previous character's alignment), -k replaces k+1 original characters.
struct Changed {
  char32_t cp;
  int change;
};

// Rebuilds `n` from the characters of `chars` produced from original characters `orig` (each with
// its alignment), replaying HF's NormalizedString::transform alignment rules.
void emit(const std::vector<Changed>& chars, const std::vector<Range>& orig, Normalized& out) {
  size_t consumed = 0;
  for (const auto& c : chars) {
    Range r;
    if (c.change > 0) {
      r = consumed > 0 ? orig[consumed - 1] : (orig.empty() ? Range{0, 0} : orig[0]);
    } else {
      r = consumed < orig.size() ? orig[consumed] : orig.back();
      consumed += static_cast<size_t>(1 - c.change);
    }
    const size_t before = out.text.size();
    utf8::append(out.text, c.cp);
    out.align.insert(out.align.end(), out.text.size() - before, r);
  }
}

class UnicodeNormalizer : public Normalizer {
 public:
  enum class Form { NFC, NFD, NFKC, NFKD };
  UnicodeNormalizer(Form form, const std::string& where) : form_(form) {
    UErrorCode status = U_ZERO_ERROR;
    const bool compat = form == Form::NFKC || form == Form::NFKD;
    full_ = compat ? (form == Form::NFKC ? icu::Normalizer2::getNFKCInstance(status)
                                         : icu::Normalizer2::getNFKDInstance(status))
                   : (form == Form::NFC ? icu::Normalizer2::getNFCInstance(status)
                                        : icu::Normalizer2::getNFDInstance(status));
    decompose_ = compat ? icu::Normalizer2::getNFKDInstance(status)
                        : icu::Normalizer2::getNFDInstance(status);
    compose_ = icu::Normalizer2::getNFCInstance(status);
    if (U_FAILURE(status)) throw std::runtime_error(where + ": ICU normalizer unavailable");
  }

  void normalize(Normalized& n) const override {
    UErrorCode status = U_ZERO_ERROR;
    const auto whole = icu::UnicodeString::fromUTF8(n.text);
    if (full_->isNormalized(whole, status) && U_SUCCESS(status)) return;  // the common case
    Normalized out;
    // Normalise segment by segment (a segment starts at each normalisation boundary) so that
    // alignments stay local and each segment's text is exactly what ICU produces.
    size_t seg_begin = 0;
    for (size_t i = 0; i <= n.text.size();) {
      size_t next = i;
      const bool at_end = i == n.text.size();
      const char32_t cp = at_end ? 0 : utf8::decode(n.text, next);
      if (at_end || (i > seg_begin && full_->hasBoundaryBefore(static_cast<UChar32>(cp)))) {
        normalize_segment(n, seg_begin, i, out);
        seg_begin = i;
      }
      if (at_end) break;
      i = next;
    }
    n = std::move(out);
  }

 private:
  void normalize_segment(const Normalized& n, size_t begin, size_t end, Normalized& out) const {
    std::vector<Range> orig;
    std::vector<Changed> chars;
    for (size_t i = begin; i < end;) {
      orig.push_back(n.align[i]);
      const char32_t cp = utf8::decode(n.text, i);
      icu::UnicodeString d;
      if (!decompose_->getDecomposition(static_cast<UChar32>(cp), d))
        d = icu::UnicodeString(static_cast<UChar32>(cp));
      for (int32_t k = 0, first = 1; k < d.length(); first = 0) {
        const UChar32 c = d.char32At(k);
        chars.push_back({static_cast<char32_t>(c), first ? 0 : 1});
        k += U16_LENGTH(c);
      }
    }
    canonical_order(chars);
    if (form_ == Form::NFC || form_ == Form::NFKC) compose(chars);

    // Safety net: the text must be ICU's; if our replay disagrees, keep ICU's text and align each
    // character to the segment's first original character.
    std::string mine;
    for (const auto& c : chars) utf8::append(mine, c.cp);
    UErrorCode status = U_ZERO_ERROR;
    std::string expected;
    full_->normalize(icu::UnicodeString::fromUTF8(n.text.substr(begin, end - begin)), status)
        .toUTF8String(expected);
    if (mine != expected) {
      chars.clear();
      for (size_t i = 0; i < expected.size();)
        chars.push_back({utf8::decode(expected, i), chars.empty() ? 0 : 1});
      if (!chars.empty()) chars[0].change = 1 - static_cast<int>(orig.size());
    }
    emit(chars, orig, out);
  }

  // Stable sort of each run of non-starters by canonical combining class.
  static void canonical_order(std::vector<Changed>& chars) {
    size_t i = 0;
    while (i < chars.size()) {
      if (u_getCombiningClass(static_cast<UChar32>(chars[i].cp)) == 0) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < chars.size() && u_getCombiningClass(static_cast<UChar32>(chars[j].cp)) != 0) ++j;
      std::stable_sort(chars.begin() + static_cast<std::ptrdiff_t>(i),
                       chars.begin() + static_cast<std::ptrdiff_t>(j),
                       [](const Changed& a, const Changed& b) {
                         return u_getCombiningClass(static_cast<UChar32>(a.cp)) <
                                u_getCombiningClass(static_cast<UChar32>(b.cp));
                       });
      i = j;
    }
  }

  // Canonical composition (UAX #15): a character merges into the last starter unless blocked.
  void compose(std::vector<Changed>& chars) const {
    std::vector<Changed> out;
    long starter = -1;
    int last_ccc = -1;  // ccc of the last character kept after the starter; -1 = none yet
    for (const auto& c : chars) {
      const int ccc = u_getCombiningClass(static_cast<UChar32>(c.cp));
      if (starter >= 0) {
        const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
        const UChar32 composite = blocked
                                      ? -1
                                      : compose_->composePair(static_cast<UChar32>(out[starter].cp),
                                                              static_cast<UChar32>(c.cp));
        if (composite >= 0) {
          out[starter].cp = static_cast<char32_t>(composite);
          out[starter].change += c.change - 1;
          continue;
        }
      }
      out.push_back(c);
      if (ccc == 0) {
        starter = static_cast<long>(out.size()) - 1;
        last_ccc = -1;
      } else {
        last_ccc = ccc;
      }
    }
    chars = std::move(out);
  }

  Form form_;
  const icu::Normalizer2* full_;
  const icu::Normalizer2* decompose_;
  const icu::Normalizer2* compose_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(Normalized& n) const override {
    for (const auto& p : parts_) p->normalize(n);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(Normalized& n) const override {
    if (n.empty()) return;
    // The prefix is "inserted before the first character": it borrows that character's range.
    const Range first = n.align.front();
    n.text.insert(0, prefix_);
    n.align.insert(n.align.begin(), prefix_.size(), first);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const std::string& pattern, std::string content, const std::string& where)
      : regex_(pattern, where), content_(std::move(content)) {}
  void normalize(Normalized& n) const override {
    const auto matches = regex_.find_all(n.text);
    if (matches.empty()) return;
    Normalized out;
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
      out.text.append(n.text, prev, b - prev);
      out.align.insert(out.align.end(), n.align.begin() + static_cast<std::ptrdiff_t>(prev),
                       n.align.begin() + static_cast<std::ptrdiff_t>(b));
      std::vector<Range> orig;
      for (size_t i = b; i < e; i += utf8::sequence_length(static_cast<unsigned char>(n.text[i])))
        orig.push_back(n.align[i]);
      std::vector<Changed> chars;
      for (size_t i = 0; i < content_.size();) chars.push_back({utf8::decode(content_, i), 0});
      // New characters replace old ones one for one; extras are insertions, and the last new
      // character absorbs any surplus old ones.
      for (size_t k = orig.size(); k < chars.size(); ++k) chars[k].change = 1;
      if (!chars.empty() && orig.size() > chars.size())
        chars.back().change = -static_cast<int>(orig.size() - chars.size());
      emit(chars, orig, out);
      prev = e;
    }
    out.text.append(n.text, prev, std::string::npos);
    out.align.insert(out.align.end(), n.align.begin() + static_cast<std::ptrdiff_t>(prev),
                     n.align.end());
    n = std::move(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

// HF patterns are {"String": "..."} (literal) or {"Regex": "..."}.
std::string pattern_of(const nlohmann::json& p, const std::string& where) {
  if (p.contains("String")) return regex_escape(p.at("String").get<std::string>());
  if (p.contains("Regex")) return p.at("Regex").get<std::string>();
  throw std::runtime_error(where + ": pattern must have \"String\" or \"Regex\"");
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config,
                                            const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  using Form = UnicodeNormalizer::Form;
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(Form::NFC, where);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(Form::NFD, where);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(Form::NFKC, where);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(Form::NFKD, where);
  if (type == "Prepend")
    return std::make_unique<PrependNormalizer>(config.at("prepend").get<std::string>());
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(pattern_of(config.at("pattern"), where),
                                               config.at("content").get<std::string>(), where);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    const auto& list = config.at("normalizers");
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_normalizer(list[i], where + ".normalizers[" + std::to_string(i) + "]");
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  throw std::runtime_error(where + ": unsupported normalizer type '" + type + "'");
}

}  // namespace kubetune::text
