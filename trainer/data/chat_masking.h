#pragma once
// Loss masking for chat conversations: which bytes of the rendered conversation belong to the
// assistant turns, and which tokens therefore are targets.
//
// The span of assistant message i is
//   [len(render(messages[:i], add_generation_prompt=true)), len(render(messages[:i+1])))
// i.e. the assistant content plus its end-of-turn marker, but not the header the generation prompt
// already contains (at inference time the model is given the header and must produce the rest).
// This works for any template that is "prefix-stable": rendering a prefix of the conversation
// yields a prefix of the full rendering. Two departures are understood:
// - a template that ends every conversation with the EOS token (Phi-4-mini): the turn ends
//   before it (extra's "eos_token" is the EOS token's text);
// - a template that rewrites an assistant turn once a later user message exists (Qwen3 drops the
//   reasoning of turns before the last user message): that turn is context, not a target, since
//   what the model is trained to produce must be what it would write, and the rewritten turn is
//   what it is shown later. The turns after the last user message stay targets.
// Anything else (a generation prompt that is not a prefix, a final turn rewritten) is rejected
// with an error.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace kubetune::data {

struct ByteSpan {
  size_t begin = 0;  // inclusive byte offset into the full rendering
  size_t end = 0;    // exclusive
};

// Spans of the assistant messages with index >= first_target, in order. `full` must be
// chat.render(messages, false, extra). Throws std::runtime_error if the template is not
// prefix-stable.
std::vector<ByteSpan> assistant_spans(const text::ChatTemplate& chat,
                                      const nlohmann::json& messages, size_t first_target,
                                      const nlohmann::json& extra, const std::string& full);

// labels[t] = ids[t] if token t's byte range starts inside one of the (sorted, disjoint) spans,
// else -100.
std::vector<int32_t> labels_in_spans(const text::Encoding& encoding,
                                     const std::vector<ByteSpan>& spans);

}  // namespace kubetune::data
