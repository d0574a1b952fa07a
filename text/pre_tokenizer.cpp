#include "text/pre_tokenizer.h"

#include <stdexcept>

#include "text/byte_level.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace kubetune::text {
namespace {

// The GPT-2 pattern ByteLevel uses when use_regex is true.
const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext };

// Splits one piece around regex matches according to HF's SplitDelimiterBehavior.
void split_piece(const Normalized& n, const Regex& regex, Behavior behavior, bool invert,
                 std::vector<Normalized>& out) {
  // (begin, end, is_match) spans covering the whole text.
  std::vector<std::tuple<size_t, size_t, bool>> spans;
  size_t prev = 0;
  for (const auto& [b, e] : regex.find_all(n.text)) {
    if (b > prev) spans.emplace_back(prev, b, invert);
    spans.emplace_back(b, e, !invert);
    prev = e;
  }
  if (prev < n.text.size()) spans.emplace_back(prev, n.text.size(), invert);

  std::vector<std::pair<size_t, size_t>> pieces;
  bool merge_into_next = false;
  for (const auto& [b, e, is_delim] : spans) {
    switch (behavior) {
      case Behavior::Isolated:
        pieces.emplace_back(b, e);
        break;
      case Behavior::Removed:
        if (!is_delim) pieces.emplace_back(b, e);
        break;
      case Behavior::MergedWithPrevious:
        if (is_delim && !pieces.empty() && pieces.back().second == b) {
          pieces.back().second = e;
        } else {
          pieces.emplace_back(b, e);
        }
        break;
      case Behavior::MergedWithNext:
        if (merge_into_next && !pieces.empty()) {
          pieces.back().second = e;
        } else {
          pieces.emplace_back(b, e);
        }
        merge_into_next = is_delim;
        break;
    }
  }
  for (const auto& [b, e] : pieces) {
    if (e > b) out.push_back(n.slice(b, e));
  }
}

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  throw std::runtime_error(where + ": unsupported split behavior '" + name + "'");
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(const nlohmann::json& config, const std::string& where)
      : regex_(pattern(config.at("pattern"), where), where + ".pattern"),
        behavior_(parse_behavior(config.value("behavior", "Isolated"), where + ".behavior")),
        invert_(config.value("invert", false)) {}

  void pre_tokenize(std::vector<Normalized>& pieces, size_t) const override {
    std::vector<Normalized> out;
    for (const auto& p : pieces) split_piece(p, regex_, behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  static std::string pattern(const nlohmann::json& p, const std::string& where) {
    if (p.contains("String")) return regex_escape(p.at("String").get<std::string>());
    if (p.contains("Regex")) return p.at("Regex").get<std::string>();
    throw std::runtime_error(where + ".pattern: expected {\"String\": ...} or {\"Regex\": ...}");
  }
  Regex regex_;
  Behavior behavior_;
  bool invert_;
};

void prepend(Normalized& n, const std::string& prefix) {
  const Range first = n.align.front();
  n.text.insert(0, prefix);
  n.align.insert(n.align.begin(), prefix.size(), first);
}

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const nlohmann::json& config, const std::string& where)
      : add_prefix_space_(config.value("add_prefix_space", true)) {
    if (config.value("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Pattern, where);
  }

  void pre_tokenize(std::vector<Normalized>& pieces, size_t) const override {
    std::vector<Normalized> split;
    for (auto& p : pieces) {
      if (add_prefix_space_ && !p.empty() && p.text[0] != ' ') prepend(p, " ");
      if (regex_) {
        split_piece(p, *regex_, Behavior::Isolated, false, split);
      } else if (!p.empty()) {
        split.push_back(std::move(p));
      }
    }
    pieces.clear();
    for (const auto& p : split) pieces.push_back(to_byte_level(p));
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(const nlohmann::json& config, const std::string& where)
      : replacement_(config.value("replacement", "\xE2\x96\x81")),
        split_(config.value("split", true)),
        split_regex_(regex_escape(replacement_), where) {
    std::string scheme = config.value("prepend_scheme", "");
    if (scheme.empty()) scheme = config.value("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      throw std::runtime_error(where + ".prepend_scheme: unsupported value '" + scheme + "'");
    }
    scheme_ = scheme;
  }

  void pre_tokenize(std::vector<Normalized>& pieces, size_t split_index) const override {
    std::vector<Normalized> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      Normalized replaced;
      const Normalized& p = pieces[i];
      for (size_t k = 0; k < p.text.size(); ++k) {
        if (p.text[k] == ' ') {
          replaced.text += replacement_;
          replaced.align.insert(replaced.align.end(), replacement_.size(), p.align[k]);
        } else {
          replaced.text.push_back(p.text[k]);
          replaced.align.push_back(p.align[k]);
        }
      }
      const bool first = split_index == 0 && i == 0;
      const bool want_prefix = scheme_ == "always" || (scheme_ == "first" && first);
      if (want_prefix && !replaced.empty() && replaced.text.rfind(replacement_, 0) != 0)
        prepend(replaced, replacement_);
      if (split_) {
        split_piece(replaced, split_regex_, Behavior::MergedWithNext, false, out);
      } else if (!replaced.empty()) {
        out.push_back(std::move(replaced));
      }
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  std::string scheme_;
  bool split_;
  Regex split_regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Normalized>& pieces, size_t split_index) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces, split_index);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace

Normalized to_byte_level(const Normalized& n) {
  Normalized out;
  out.text.reserve(n.text.size() * 2);
  for (size_t i = 0; i < n.text.size(); ++i) {
    const std::string& c = byte_level::byte_to_char(static_cast<unsigned char>(n.text[i]));
    out.text += c;
    out.align.insert(out.align.end(), c.size(), n.align[i]);
  }
  return out;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config,
                                                 const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(config, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(config, where);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(config, where);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    const auto& list = config.at("pretokenizers");
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], where + ".pretokenizers[" + std::to_string(i) + "]");
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  throw std::runtime_error(where + ": unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace kubetune::text
