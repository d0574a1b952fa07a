#include "text/added_vocab.h"

#include <algorithm>
#include <stdexcept>

#include "text/utf8.h"

namespace kubetune::text {
namespace {

// Word characters for single_word matching (HF uses Unicode alphanumerics plus '_').
bool is_word_char(char32_t cp) {
  if (cp == '_' || (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'))
    return true;
  return cp >= 0x80 && !utf8::is_whitespace(cp);
}

char32_t char_before(std::string_view s, size_t pos) {
  size_t b = pos;
  do {
    --b;
  } while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80);
  return utf8::decode(s, b);
}

}  // namespace

AddedVocab::AddedVocab(const nlohmann::json& list, const std::string& where) {
  if (list.is_null()) return;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& t = list[i];
    const std::string at = where + "[" + std::to_string(i) + "]";
    if (!t.contains("id") || !t.contains("content"))
      throw std::runtime_error(at + ": needs \"id\" and \"content\"");
    AddedToken tok;
    tok.id = t.at("id").get<int32_t>();
    tok.content = t.at("content").get<std::string>();
    tok.special = t.value("special", false);
    tok.lstrip = t.value("lstrip", false);
    tok.rstrip = t.value("rstrip", false);
    tok.single_word = t.value("single_word", false);
    tok.normalized = t.value("normalized", !tok.special);
    if (tok.content.empty()) throw std::runtime_error(at + ".content: empty added token");
    by_id_[tok.id] = tokens_.size();
    by_content_[tok.content] = tokens_.size();
    by_first_byte_[static_cast<unsigned char>(tok.content[0])].push_back(tokens_.size());
    tokens_.push_back(std::move(tok));
  }
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

const AddedToken* AddedVocab::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocab::token_to_id(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return tokens_[it->second].id;
}

int32_t AddedVocab::max_id() const {
  int32_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

std::optional<std::pair<size_t, const AddedToken*>> AddedVocab::longest_match_at(
    std::string_view text, size_t pos) const {
  for (size_t idx : by_first_byte_[static_cast<unsigned char>(text[pos])]) {
    const AddedToken& t = tokens_[idx];
    if (text.compare(pos, t.content.size(), t.content) != 0) continue;
    const size_t end = pos + t.content.size();
    if (t.single_word) {
      if (pos > 0 && is_word_char(char_before(text, pos))) continue;
      size_t after = end;
      if (end < text.size() && is_word_char(utf8::decode(text, after))) continue;
    }
    return std::make_pair(end, &t);
  }
  return std::nullopt;
}

std::vector<Segment> AddedVocab::split(std::string_view text) const {
  std::vector<Segment> out;
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), std::nullopt});
    return out;
  }
  size_t text_start = 0;  // start of the pending plain-text stretch
  for (size_t pos = 0; pos < text.size();) {
    const auto match = longest_match_at(text, pos);
    if (!match) {
      pos += utf8::sequence_length(static_cast<unsigned char>(text[pos]));
      continue;
    }
    auto [end, token] = *match;
    size_t begin = pos;
    // lstrip/rstrip make the token swallow the whitespace around it.
    if (token->lstrip) {
      while (begin > text_start && utf8::is_whitespace(static_cast<unsigned char>(text[begin - 1])))
        --begin;
    }
    if (token->rstrip) {
      while (end < text.size() && utf8::is_whitespace(static_cast<unsigned char>(text[end]))) ++end;
    }
    if (begin > text_start) out.push_back({text_start, begin, std::nullopt});
    out.push_back({begin, end, token->id, pos, pos + token->content.size()});
    text_start = pos = end;
  }
  if (text_start < text.size()) out.push_back({text_start, text.size(), std::nullopt});
  return out;
}

}  // namespace kubetune::text
