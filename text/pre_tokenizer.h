// tokenizer.json "pre_tokenizer": splits normalized text into pieces that BPE encodes separately.
// Supported: Split (regex or literal), ByteLevel, Metaspace, Sequence.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/normalized.h"

namespace kubetune::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their sub-pieces. `split_index` is the index of the text segment among the
  // segments produced by added-token matching (Metaspace's prepend_scheme "first" needs it).
  virtual void pre_tokenize(std::vector<Normalized>& pieces, size_t split_index) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config,
                                                 const std::string& where);

// Maps every byte of `n` to its byte-level character (each keeps its source character's range).
Normalized to_byte_level(const Normalized& n);

}  // namespace kubetune::text
