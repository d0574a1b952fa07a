// A Hugging Face tokenizer.json tokenizer (byte-level BPE as in Llama 3 / Qwen2 / GPT-2 / SmolLM,
// and SentencePiece-style BPE as in Llama 2 / Mistral) whose ids, offsets and decoded text match
// the `tokenizers` library exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kubetune::text {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::pair<size_t, size_t>> offsets;  // byte offsets [begin,end) into the input string
};

class Tokenizer {
 public:
  // dir/tokenizer.json, plus dir/tokenizer_config.json (when present) for the bos/eos/pad names.
  static Tokenizer from_dir(const std::string& dir);
  static Tokenizer from_file(const std::string& tokenizer_json_path);

  // add_special_tokens=true applies the post-processor (e.g. TemplateProcessing adding BOS) like
  // HF's encode(add_special_tokens=True). Added/special tokens written in the text are always
  // matched. Throws std::runtime_error if `text` is not valid UTF-8. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  Encoding encode_with_offsets(std::string_view text, bool add_special_tokens = false) const;
  // Unknown ids are skipped, like HF.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // Throws std::out_of_range for ids that are neither in the vocab nor added tokens.
  std::string id_to_token(int32_t id) const;
  size_t vocab_size() const;  // including added tokens (max id + 1)
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_id() const;  // from tokenizer_config.json token names when present
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  std::string bos_token() const;  // "" when absent
  std::string eos_token() const;

 private:
  struct Impl;
  static std::unique_ptr<Impl> load_json(const std::string& path);
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;  // immutable and shared: copies are cheap and thread-safe
};

}  // namespace kubetune::text
