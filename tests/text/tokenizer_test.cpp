// Compares kubetune::text::Tokenizer with Hugging Face `tokenizers` on the reference fixtures.
#include "text/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "tests/text/fixtures.h"

namespace kubetune::text {
namespace {

using testing::fixtures_dir;
using testing::read_fixture_json;

std::optional<int32_t> optional_id(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return j.get<int32_t>();
}

std::vector<std::pair<size_t, size_t>> offsets_of(const nlohmann::json& j) {
  std::vector<std::pair<size_t, size_t>> out;
  for (const auto& o : j) out.emplace_back(o[0].get<size_t>(), o[1].get<size_t>());
  return out;
}

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixture, MatchesHuggingFace) {
  KT_REQUIRE_FIXTURES();
  const std::string dir = fixtures_dir() + "/" + GetParam();
  const auto expected = read_fixture_json(GetParam() + "/expected.json");
  const Tokenizer tok = Tokenizer::from_dir(dir);

  EXPECT_EQ(tok.vocab_size(), expected["vocab_size"].get<size_t>());
  EXPECT_EQ(tok.bos_token(), expected["bos_token"].get<std::string>());
  EXPECT_EQ(tok.eos_token(), expected["eos_token"].get<std::string>());
  EXPECT_EQ(tok.bos_id(), optional_id(expected["bos_id"]));
  EXPECT_EQ(tok.eos_id(), optional_id(expected["eos_id"]));
  EXPECT_EQ(tok.pad_id(), optional_id(expected["pad_id"]));

  for (const auto& e : expected["encodings"]) {
    const auto text = e["text"].get<std::string>();
    SCOPED_TRACE("text: " + nlohmann::json(text).dump());
    const auto ids = e["ids"].get<std::vector<int32_t>>();
    const auto ids_special = e["ids_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), ids);
    EXPECT_EQ(tok.encode(text, true), ids_special);
    const Encoding plain = tok.encode_with_offsets(text);
    EXPECT_EQ(plain.ids, ids);
    EXPECT_EQ(plain.offsets, offsets_of(e["offsets"]));
    const Encoding special = tok.encode_with_offsets(text, true);
    EXPECT_EQ(special.ids, ids_special);
    EXPECT_EQ(special.offsets, offsets_of(e["offsets_special"]));
    EXPECT_EQ(tok.decode(ids_special), e["decode"].get<std::string>());
    EXPECT_EQ(tok.decode(ids_special, true), e["decode_skip"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TokenizerFixture,
                         ::testing::Values("llama3", "qwen2", "smollm", "mistral",
                                           "mistral_metaspace", "qwen3", "gemma3", "phi4",
                                           "gpt_oss"));

TEST(Tokenizer, FromFileMatchesFromDir) {
  KT_REQUIRE_FIXTURES();
  const Tokenizer a = Tokenizer::from_dir(fixtures_dir() + "/llama3");
  const Tokenizer b = Tokenizer::from_file(fixtures_dir() + "/llama3/tokenizer.json");
  EXPECT_EQ(a.encode("Hello <|eot_id|> world", true), b.encode("Hello <|eot_id|> world", true));
  EXPECT_FALSE(b.bos_id().has_value());  // names come from tokenizer_config.json only
  EXPECT_EQ(b.bos_token(), "");
}

TEST(Tokenizer, TokenLookupsRoundTrip) {
  KT_REQUIRE_FIXTURES();
  const Tokenizer tok = Tokenizer::from_dir(fixtures_dir() + "/qwen2");
  for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id) {
    EXPECT_EQ(tok.token_to_id(tok.id_to_token(id)), id);
  }
  EXPECT_EQ(tok.token_to_id("<|im_end|>"), tok.eos_id());
  EXPECT_TRUE(tok.is_special(*tok.eos_id()));
  EXPECT_FALSE(tok.is_special(*tok.token_to_id("<tool_call>")));
  EXPECT_FALSE(tok.token_to_id("definitely not a token").has_value());
  EXPECT_THROW(tok.id_to_token(static_cast<int32_t>(tok.vocab_size()) + 5), std::out_of_range);
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  KT_REQUIRE_FIXTURES();
  const Tokenizer tok = Tokenizer::from_dir(fixtures_dir() + "/llama3");
  const std::string text = "Concurrent tokenization of the same text — 並行 😀 1234567 <|eot_id|>";
  const auto reference = tok.encode(text, true);
  std::vector<std::thread> threads;
  std::vector<bool> ok(4, false);
  for (size_t t = 0; t < ok.size(); ++t) {
    threads.emplace_back([&, t] {
      bool all = true;
      for (int i = 0; i < 200; ++i)
        all = all && tok.encode(text + std::to_string(i % 7), true).size() >= reference.size();
      ok[t] = all && tok.encode(text, true) == reference;
    });
  }
  for (auto& th : threads) th.join();
  for (bool b : ok) EXPECT_TRUE(b);
}

TEST(Tokenizer, RejectsInvalidUtf8) {
  KT_REQUIRE_FIXTURES();
  const Tokenizer tok = Tokenizer::from_dir(fixtures_dir() + "/llama3");
  EXPECT_THROW(tok.encode(std::string("abc\xff\xfe")), std::runtime_error);
}

class TokenizerErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kubetune_text_err_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name) << content;
  }
  std::string expect_error(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected std::runtime_error";
    return "";
  }
  std::filesystem::path dir_;
};

TEST_F(TokenizerErrors, MissingFileNamesThePath) {
  const std::string msg = expect_error([&] { Tokenizer::from_dir(dir_.string()); });
  EXPECT_NE(msg.find((dir_ / "tokenizer.json").string()), std::string::npos) << msg;
}

TEST_F(TokenizerErrors, InvalidJsonNamesTheFile) {
  write("tokenizer.json", "{ not json");
  const std::string msg = expect_error([&] { Tokenizer::from_dir(dir_.string()); });
  EXPECT_NE(msg.find("tokenizer.json: invalid JSON"), std::string::npos) << msg;
}

TEST_F(TokenizerErrors, UnsupportedModelAndComponents) {
  write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_NE(expect_error([&] {
              Tokenizer::from_dir(dir_.string());
            }).find("unsupported model type 'Unigram'"),
            std::string::npos);
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                             "pre_tokenizer": {"type": "BertPreTokenizer"}})");
  EXPECT_NE(expect_error([&] {
              Tokenizer::from_dir(dir_.string());
            }).find("pre_tokenizer: unsupported pre_tokenizer type 'BertPreTokenizer'"),
            std::string::npos);
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  EXPECT_NE(expect_error([&] { Tokenizer::from_dir(dir_.string()); }).find("model.merges[0]"),
            std::string::npos);
}

TEST_F(TokenizerErrors, SpecialTokenMissingFromVocab) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  const std::string msg = expect_error([&] { Tokenizer::from_dir(dir_.string()); });
  EXPECT_NE(msg.find("tokenizer_config.json: special token '<s>'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kubetune::text
