// tokenizer.json "decoder": turns token strings back into text. Supported: ByteLevel, Replace,
// ByteFallback, Fuse, Strip, Metaspace, Sequence (HF's decode_chain semantics).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kubetune::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& where);

// Replaces invalid UTF-8 with U+FFFD the way Rust's String::from_utf8_lossy does.
std::string utf8_lossy(const std::string& bytes);

}  // namespace kubetune::text
