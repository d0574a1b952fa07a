#pragma once
// Turns one JSON record into token ids and loss labels (before truncation).

#include <nlohmann/json.hpp>

#include "trainer/data/dataset.h"
#include "trainer/data/example.h"

namespace kubetune::data {

struct EncodeContext {
  const text::Tokenizer& tokenizer;
  const text::ChatTemplate* chat;  // null when the tokenizer folder has no chat template
  LossOn loss_on;
};

// `format` must not be Auto. Errors throw std::runtime_error without a location; the caller
// prefixes "path:LINE: ". The returned example's source_line is not set.
Example encode_record(const nlohmann::json& record, Format format, const EncodeContext& context);

}  // namespace kubetune::data
