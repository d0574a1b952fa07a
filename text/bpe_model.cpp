#include "text/bpe_model.h"

#include <cstdio>
#include <limits>
#include <queue>
#include <stdexcept>

#include "text/utf8.h"

namespace kubetune::text {
namespace {

constexpr size_t kMaxCacheEntries = 200000;  // bounded so long-running jobs do not grow forever

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Merges are either "left right" strings (older files) or ["left", "right"] pairs (newer ones).
std::pair<std::string, std::string> parse_merge(const nlohmann::json& m, const std::string& where) {
  if (m.is_string()) {
    const auto s = m.get<std::string>();
    const auto space = s.find(' ', 1);
    if (space == std::string::npos)
      throw std::runtime_error(where + ": merge '" + s + "' has no space");
    return {s.substr(0, space), s.substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2) return {m[0].get<std::string>(), m[1].get<std::string>()};
  throw std::runtime_error(where + ": each merge must be a string or a pair of strings");
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& config, const std::string& where) {
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (config.contains(field) && !config[field].is_null() &&
        !config[field].get<std::string>().empty()) {
      throw std::runtime_error(where + "." + field + ": not supported");
    }
  }
  if (config.contains("dropout") && !config["dropout"].is_null() &&
      config["dropout"].get<double>() > 0.0) {
    throw std::runtime_error(where + ".dropout: BPE dropout is not supported");
  }
  const auto& vocab = config.at("vocab");
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    if (id < 0) throw std::runtime_error(where + ".vocab: negative id for '" + it.key() + "'");
    vocab_[it.key()] = id;
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(static_cast<size_t>(id) + 1);
      id_known_.resize(static_cast<size_t>(id) + 1, false);
    }
    id_to_token_[static_cast<size_t>(id)] = it.key();
    id_known_[static_cast<size_t>(id)] = true;
  }
  const auto& merges = config.at("merges");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string at = where + ".merges[" + std::to_string(rank) + "]";
    const auto [left, right] = parse_merge(merges[rank], at);
    const auto l = vocab_.find(left), r = vocab_.find(right), m = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || m == vocab_.end()) {
      throw std::runtime_error(at + ": merge '" + left + " " + right +
                               "' uses a token missing from the vocab");
    }
    merges_.emplace(pair_key(l->second, r->second),
                    std::make_pair(static_cast<int32_t>(rank), m->second));
  }
  if (config.contains("unk_token") && !config["unk_token"].is_null()) {
    const auto unk = config["unk_token"].get<std::string>();
    const auto it = vocab_.find(unk);
    if (it == vocab_.end())
      throw std::runtime_error(where + ".unk_token: '" + unk + "' is not in the vocab");
    unk_id_ = it->second;
  }
  fuse_unk_ = config.value("fuse_unk", false);
  byte_fallback_ = config.value("byte_fallback", false);
  ignore_merges_ = config.value("ignore_merges", false);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() ||
      !id_known_[static_cast<size_t>(id)])
    return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

// One symbol per character; characters missing from the vocab become <0xNN> byte tokens
// (byte_fallback) or the unknown token (consecutive ones fused when fuse_unk), else are dropped.
void BpeModel::add_initial_symbols(std::string_view piece, std::vector<Token>& symbols) const {
  for (size_t i = 0; i < piece.size();) {
    const size_t len =
        std::min(utf8::sequence_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    const auto it = vocab_.find(std::string(piece.substr(i, len)));
    if (it != vocab_.end()) {
      symbols.push_back({it->second, i, i + len});
    } else if (byte_fallback_) {
      std::vector<Token> bytes;
      for (size_t k = i; k < i + len; ++k) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", static_cast<unsigned char>(piece[k]));
        const auto b = vocab_.find(name);
        if (b == vocab_.end()) break;
        bytes.push_back({b->second, k, k + 1});
      }
      if (bytes.size() == len) {
        symbols.insert(symbols.end(), bytes.begin(), bytes.end());
      } else if (unk_id_) {
        symbols.push_back({*unk_id_, i, i + len});
      }
    } else if (unk_id_) {
      if (fuse_unk_ && !symbols.empty() && symbols.back().id == *unk_id_ &&
          symbols.back().end == i) {
        symbols.back().end = i + len;
      } else {
        symbols.push_back({*unk_id_, i, i + len});
      }
    }
    i += len;
  }
}

// Applies merges best rank first (leftmost on ties) with a heap over a linked list of symbols,
// exactly HF's Word::merge_all, so long words stay O(n log n).
std::vector<Token> BpeModel::merge_word(std::string_view piece) const {
  std::vector<Token> initial;
  if (ignore_merges_) {
    const auto it = vocab_.find(std::string(piece));
    if (it != vocab_.end()) return {{it->second, 0, piece.size()}};
  }
  add_initial_symbols(piece, initial);
  if (initial.size() < 2) return initial;

  struct Symbol {
    Token token;
    long prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(initial.size());
  for (size_t i = 0; i < initial.size(); ++i) {
    symbols.push_back({initial[i], static_cast<long>(i) - 1,
                       i + 1 < initial.size() ? static_cast<long>(i) + 1 : -1, true});
  }
  struct Candidate {
    int32_t rank;
    long pos;  // index of the left symbol
    int32_t merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push_pair = [&](long left) {
    if (left < 0 || symbols[static_cast<size_t>(left)].next < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const auto it =
        merges_.find(pair_key(l.token.id, symbols[static_cast<size_t>(l.next)].token.id));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (long i = 0; i + 1 < static_cast<long>(symbols.size()); ++i) push_pair(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    // Skip stale entries: the pair at this position changed since it was queued.
    const auto it = merges_.find(pair_key(left.token.id, right.token.id));
    if (it == merges_.end() || it->second.first != top.rank || it->second.second != top.merged)
      continue;
    left.token = {top.merged, left.token.begin, right.token.end};
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
    push_pair(left.prev);
    push_pair(top.pos);
  }
  std::vector<Token> out;
  for (const auto& s : symbols) {
    if (s.alive) out.push_back(s.token);
  }
  return out;
}

std::vector<Token> BpeModel::tokenize(std::string_view piece) const {
  const std::string key(piece);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    const auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
  }
  auto tokens = merge_word(piece);
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(key, tokens);
  return tokens;
}

}  // namespace kubetune::text
