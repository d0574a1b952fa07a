#include "trainer/data/chat_masking.h"

#include <stdexcept>

#include "trainer/data/example.h"

namespace kubetune::data {
namespace {

nlohmann::json first_messages(const nlohmann::json& messages, size_t count) {
  return nlohmann::json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count));
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool user_message_after(const nlohmann::json& messages, size_t i) {
  for (size_t j = i + 1; j < messages.size(); ++j)
    if (messages[j].at("role") == "user") return true;
  return false;
}

[[noreturn]] void not_prefix_stable(size_t i, const char* which) {
  throw std::runtime_error(
      "chat template is not prefix-stable: rendering messages[0.." + std::to_string(i) + ")" +
      which +
      " is not a prefix of rendering the whole conversation, so the assistant turns cannot be "
      "located for loss masking (use data.lossOn: all, or a template that does not rewrite "
      "earlier turns)");
}

}  // namespace

std::vector<ByteSpan> assistant_spans(const text::ChatTemplate& chat,
                                      const nlohmann::json& messages, size_t first_target,
                                      const nlohmann::json& extra, const std::string& full) {
  std::vector<ByteSpan> spans;
  for (size_t i = first_target; i < messages.size(); ++i) {
    if (messages[i].at("role") != "assistant") continue;
    const std::string before = chat.render(first_messages(messages, i), true, extra);
    if (!starts_with(full, before)) not_prefix_stable(i, " with the generation prompt");
    std::string through = chat.render(first_messages(messages, i + 1), false, extra);
    if (!starts_with(full, through)) {
      // A template that ends every conversation with the EOS token (Phi-4-mini): the turn is the
      // part before it.
      const std::string eos = extra.value("eos_token", std::string());
      const size_t body = through.size() - eos.size();
      if (!eos.empty() && ends_with(through, eos) && ends_with(full, eos) &&
          starts_with(full, through.substr(0, body)) && body > before.size()) {
        through.resize(body);
      } else if (user_message_after(messages, i)) {
        // The template writes this turn differently once a later user message exists (Qwen3
        // drops the reasoning of turns before the last user message): as written here it is
        // history the model is shown, not what it produced, so it is context, not a target.
        continue;
      } else {
        not_prefix_stable(i + 1, "");
      }
    }
    // A template may render the generation prompt differently from the start of the assistant
    // turn; the turn then has no bytes that are unambiguously the model's.
    if (through.size() < before.size()) not_prefix_stable(i, " with the generation prompt");
    if (through.size() > before.size()) spans.push_back({before.size(), through.size()});
  }
  return spans;
}

std::vector<int32_t> labels_in_spans(const text::Encoding& encoding,
                                     const std::vector<ByteSpan>& spans) {
  std::vector<int32_t> labels(encoding.ids.size(), kIgnoreIndex);
  size_t s = 0;  // tokens come in text order, so one pass over the sorted spans suffices
  for (size_t t = 0; t < encoding.ids.size(); ++t) {
    const size_t start = encoding.offsets[t].first;
    while (s < spans.size() && spans[s].end <= start) ++s;
    if (s < spans.size() && spans[s].begin <= start) labels[t] = encoding.ids[t];
  }
  return labels;
}

}  // namespace kubetune::data
