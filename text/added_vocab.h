// tokenizer.json "added_tokens": special/control tokens matched verbatim in the input before the
// model runs (leftmost-longest, like HF's Aho-Corasick pass), honouring lstrip/rstrip/single_word.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kubetune::text {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A stretch of input: either an added token (id set) or plain text for the model.
struct Segment {
  size_t begin, end;  // the input consumed (for lstrip/rstrip tokens this includes the whitespace)
  std::optional<int32_t> id;
  size_t token_begin = 0, token_end = 0;  // offsets reported for an added token: its content only
};

class AddedVocab {
 public:
  AddedVocab() = default;
  AddedVocab(const nlohmann::json& list, const std::string& where);

  std::vector<Segment> split(std::string_view text) const;

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  int32_t max_id() const;

 private:
  std::optional<std::pair<size_t, const AddedToken*>> longest_match_at(std::string_view text,
                                                                       size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  std::vector<std::vector<size_t>> by_first_byte_ =
      std::vector<std::vector<size_t>>(256);  // longest first
};

}  // namespace kubetune::text
