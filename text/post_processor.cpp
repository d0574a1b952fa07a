#include "text/post_processor.h"

#include <stdexcept>

#include "text/byte_level.h"
#include "text/utf8.h"

namespace kubetune::text {
namespace {

class TemplateProcessor : public PostProcessor {
 public:
  TemplateProcessor(const nlohmann::json& config, const std::string& where) {
    const auto& specials = config.at("special_tokens");
    const auto& single = config.at("single");
    for (size_t i = 0; i < single.size(); ++i) {
      const auto& item = single[i];
      if (item.contains("Sequence")) {
        items_.push_back({true, {}, {}});
      } else if (item.contains("SpecialToken")) {
        const auto name = item["SpecialToken"].at("id").get<std::string>();
        if (!specials.contains(name)) {
          throw std::runtime_error(where + ".single[" + std::to_string(i) + "]: special token '" +
                                   name + "' missing from special_tokens");
        }
        const auto& s = specials[name];
        items_.push_back({false, s.at("ids").get<std::vector<int32_t>>(),
                          s.at("tokens").get<std::vector<std::string>>()});
      } else {
        throw std::runtime_error(where + ".single[" + std::to_string(i) +
                                 "]: expected Sequence or SpecialToken");
      }
    }
  }

  void process(std::vector<EncodedToken>& tokens, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    std::vector<EncodedToken> out;
    for (const auto& item : items_) {
      if (item.is_sequence) {
        out.insert(out.end(), tokens.begin(), tokens.end());
      } else {
        for (size_t k = 0; k < item.ids.size(); ++k)
          out.push_back({item.ids[k], item.tokens[k], {0, 0}});
      }
    }
    tokens = std::move(out);
  }

 private:
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
    std::vector<std::string> tokens;
  };
  std::vector<Item> items_;
};

// Counts leading (or trailing) characters that are 'Ġ' or whitespace, like HF's process_offsets.
size_t count_spaces(const std::string& token, bool from_end) {
  std::vector<char32_t> cps;
  for (size_t i = 0; i < token.size();) cps.push_back(utf8::decode(token, i));
  size_t n = 0;
  for (size_t k = 0; k < cps.size(); ++k) {
    const char32_t c = from_end ? cps[cps.size() - 1 - k] : cps[k];
    if (c != byte_level::kSpaceChar && !utf8::is_whitespace(c)) break;
    ++n;
  }
  return n;
}

class ByteLevelProcessor : public PostProcessor {
 public:
  explicit ByteLevelProcessor(const nlohmann::json& config)
      : trim_offsets_(config.value("trim_offsets", true)),
        add_prefix_space_(config.value("add_prefix_space", true)) {}

  void process(std::vector<EncodedToken>& tokens, bool) const override {
    if (!trim_offsets_) return;
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto& [start, end] = tokens[i].offsets;
      size_t leading = count_spaces(tokens[i].token, false);
      const size_t trailing = count_spaces(tokens[i].token, true);
      if (leading > 0) {
        // A single leading space on the first token may be the one add_prefix_space inserted.
        if ((i == 0 || start == 0) && add_prefix_space_ && leading == 1) leading = 0;
        start = std::min(start + leading, end);
      }
      if (trailing > 0 && end >= trailing) end = std::max(end - trailing, start);
    }
  }

 private:
  bool trim_offsets_;
  bool add_prefix_space_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts)
      : parts_(std::move(parts)) {}
  void process(std::vector<EncodedToken>& tokens, bool add_special_tokens) const override {
    for (const auto& p : parts_) p->process(tokens, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& config,
                                                   const std::string& where) {
  if (config.is_null()) return nullptr;
  const std::string type = config.value("type", "");
  if (type == "TemplateProcessing") return std::make_unique<TemplateProcessor>(config, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelProcessor>(config);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    const auto& list = config.at("processors");
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_post_processor(list[i], where + ".processors[" + std::to_string(i) + "]");
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  throw std::runtime_error(where + ": unsupported post_processor type '" + type + "'");
}

}  // namespace kubetune::text
