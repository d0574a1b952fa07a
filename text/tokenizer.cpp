#include "text/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common/strict_json.h"
#include "text/added_vocab.h"
#include "text/bpe_model.h"
#include "text/decoder.h"
#include "text/normalizer.h"
#include "text/post_processor.h"
#include "text/pre_tokenizer.h"
#include "text/tokenizer_config.h"
#include "text/utf8.h"

namespace kubetune::text {

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocab added;
  std::string bos, eos, pad;  // token names from tokenizer_config.json ("" = absent)

  std::vector<EncodedToken> run(std::string_view text, bool add_special_tokens) const;
  std::optional<int32_t> lookup(std::string_view token) const {
    if (auto id = added.token_to_id(token)) return id;
    return model->token_to_id(token);
  }
};

std::vector<EncodedToken> Tokenizer::Impl::run(std::string_view text,
                                               bool add_special_tokens) const {
  if (!utf8::is_valid(text))
    throw std::runtime_error("Tokenizer::encode: input is not valid UTF-8");
  std::vector<EncodedToken> out;
  const auto segments = added.split(text);
  for (size_t s = 0; s < segments.size(); ++s) {
    const Segment& seg = segments[s];
    if (seg.id) {
      out.push_back({*seg.id, added.find(*seg.id)->content, {seg.token_begin, seg.token_end}});
      continue;
    }
    Normalized n =
        Normalized::from_original(text.substr(seg.begin, seg.end - seg.begin), seg.begin);
    if (normalizer) normalizer->normalize(n);
    std::vector<Normalized> pieces;
    if (!n.empty()) pieces.push_back(std::move(n));
    if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces, s);
    for (const auto& piece : pieces) {
      for (const Token& t : model->tokenize(piece.text)) {
        out.push_back({t.id, *model->id_to_token(t.id), piece.original_range(t.begin, t.end)});
      }
    }
  }
  if (post_processor) post_processor->process(out, add_special_tokens);
  return out;
}

std::unique_ptr<Tokenizer::Impl> Tokenizer::load_json(const std::string& path) {
  const auto j = read_json_file_strict(path);
  auto impl = std::make_unique<Tokenizer::Impl>();
  const auto field = [&](const char* name) {
    return j.contains(name) ? j[name] : nlohmann::json();
  };
  const auto& model = field("model");
  if (!model.is_object()) throw std::runtime_error(path + ": missing \"model\"");
  const std::string type = model.value("type", "BPE");
  if (type != "BPE")
    throw std::runtime_error(path + ": model: unsupported model type '" + type + "' (only BPE)");
  try {
    impl->model = std::make_unique<BpeModel>(model, path + ": model");
    impl->normalizer = make_normalizer(field("normalizer"), path + ": normalizer");
    impl->pre_tokenizer = make_pre_tokenizer(field("pre_tokenizer"), path + ": pre_tokenizer");
    impl->post_processor = make_post_processor(field("post_processor"), path + ": post_processor");
    impl->decoder = make_decoder(field("decoder"), path + ": decoder");
    impl->added = AddedVocab(field("added_tokens"), path + ": added_tokens");
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": unexpected structure: " + e.what());
  }
  return impl;
}

Tokenizer Tokenizer::from_file(const std::string& tokenizer_json_path) {
  return Tokenizer(load_json(tokenizer_json_path));
}

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  auto impl = load_json(dir + "/tokenizer.json");
  const auto config = read_tokenizer_config(dir);
  impl->bos = config.bos_token;
  impl->eos = config.eos_token;
  impl->pad = config.pad_token;
  for (const auto* name : {&impl->bos, &impl->eos, &impl->pad}) {
    if (!name->empty() && !impl->lookup(*name)) {
      throw std::runtime_error(config.path + ": special token '" + *name +
                               "' is not in the vocabulary");
    }
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  for (const auto& t : impl_->run(text, add_special_tokens)) ids.push_back(t.id);
  return ids;
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, bool add_special_tokens) const {
  Encoding e;
  for (const auto& t : impl_->run(text, add_special_tokens)) {
    e.ids.push_back(t.id);
    e.offsets.push_back(t.offsets);
  }
  return e;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  for (int32_t id : ids) {
    if (const AddedToken* a = impl_->added.find(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->content);
    } else if (const std::string* t = impl_->model->id_to_token(id)) {
      tokens.push_back(*t);
    }
  }
  std::string out;
  if (impl_->decoder) {
    for (const auto& part : impl_->decoder->decode_chain(std::move(tokens))) out += part;
  } else {
    // HF joins with spaces when there is no decoder.
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  }
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return impl_->lookup(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = impl_->added.find(id)) return a->content;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  throw std::out_of_range("Tokenizer::id_to_token: unknown id " + std::to_string(id));
}

size_t Tokenizer::vocab_size() const {
  return static_cast<size_t>(std::max(impl_->model->max_id(), impl_->added.max_id()) + 1);
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* a = impl_->added.find(id);
  return a != nullptr && a->special;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  return impl_->bos.empty() ? std::nullopt : impl_->lookup(impl_->bos);
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return impl_->eos.empty() ? std::nullopt : impl_->lookup(impl_->eos);
}
std::optional<int32_t> Tokenizer::pad_id() const {
  return impl_->pad.empty() ? std::nullopt : impl_->lookup(impl_->pad);
}
std::string Tokenizer::bos_token() const { return impl_->bos; }
std::string Tokenizer::eos_token() const { return impl_->eos; }

}  // namespace kubetune::text
