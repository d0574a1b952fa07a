// tokenizer.json "model" of type BPE: vocab + ranked merges, with HF's options ignore_merges,
// byte_fallback, unk_token and fuse_unk. Results are cached per pre-token (words repeat a lot).
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kubetune::text {

struct Token {
  int32_t id;
  size_t begin, end;  // byte range inside the encoded piece
};

class BpeModel {
 public:
  BpeModel(const nlohmann::json& config, const std::string& where);
  BpeModel(const BpeModel&) = delete;

  std::vector<Token> tokenize(std::string_view piece) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when unknown
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  std::vector<Token> merge_word(std::string_view piece) const;
  void add_initial_symbols(std::string_view piece, std::vector<Token>& symbols) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_known_;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<Token>> cache_;
};

}  // namespace kubetune::text
