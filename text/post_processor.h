// tokenizer.json "post_processor": TemplateProcessing (adds BOS/EOS), ByteLevel (offset trimming),
// Sequence. Applied after the model, like HF's Tokenizer::post_process.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/normalized.h"

namespace kubetune::text {

struct EncodedToken {
  int32_t id;
  std::string token;  // vocabulary string (needed by ByteLevel offset trimming)
  Range offsets;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void process(std::vector<EncodedToken>& tokens, bool add_special_tokens) const = 0;
};

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config,
                                                   const std::string& where);

}  // namespace kubetune::text
