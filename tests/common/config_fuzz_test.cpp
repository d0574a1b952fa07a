// Seeded mutation fuzzing of the config path every run and manifest goes through: YAML → JSON →
// schema validation with defaults → TrainConfig. Whatever the bytes, the outcome is a value or a
// std::runtime_error (our named errors); never a crash, a hang, or a library exception escaping
// (nlohmann's type_error from reading a "validated" config would mean the schema let a wrong type
// through). Thousands of cases in a few seconds; the seed is fixed, so a failure reproduces.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/strict_json.h"
#include "common/train_config.h"
#include "common/yaml_file.h"

namespace kubetune {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream b;
  b << in.rdbuf();
  return b.str();
}

class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  std::string mutate(std::string text) {
    const int edits = pick(1, 4);
    for (int i = 0; i < edits; ++i) edit(text);
    return text;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  void edit(std::string& t) {
    const size_t at = t.empty() ? 0 : static_cast<size_t>(pick(0, static_cast<int>(t.size()) - 1));
    static const std::vector<std::string> specials = {"-1",         "0",
                                                      "1e308",      "-1e308",
                                                      ".nan",       ".inf",
                                                      "2147483648", "18446744073709551616",
                                                      "\"\"",       "[]",
                                                      "{}",         "null",
                                                      "~",          "true",
                                                      "&a",         "*a",
                                                      "!!binary",   "---",
                                                      "? ",         ": ",
                                                      "- ",         "\t",
                                                      "\n",         "\"\\u0000\"",
                                                      "'",          "\"",
                                                      "{{",         "%",
                                                      "<<: *a",     std::string(1, '\0'),
                                                      "\xff"};
    switch (pick(0, 4)) {
      case 0:
        if (!t.empty()) t[at] = static_cast<char>(t[at] ^ (1 << pick(0, 7)));
        break;
      case 1:
        t.insert(at, specials[static_cast<size_t>(pick(0, static_cast<int>(specials.size()) - 1))]);
        break;
      case 2:
        t.erase(at, static_cast<size_t>(pick(1, 24)));
        break;
      case 3: {  // repeat a chunk: duplicated keys, deeper nesting
        const size_t len = static_cast<size_t>(pick(1, 200));
        t.insert(at, t.substr(at, len));
        break;
      }
      default: {  // replace a line's value
        const size_t colon = t.find(": ", at);
        const size_t eol = t.find('\n', colon == std::string::npos ? at : colon);
        if (colon != std::string::npos && eol != std::string::npos)
          t.replace(colon + 2, eol - colon - 2,
                    specials[static_cast<size_t>(pick(0, static_cast<int>(specials.size()) - 1))]);
      }
    }
  }

  std::mt19937 rng_;
};

// One case: any outcome but a non-runtime_error exception (or a crash) is fine.
void load_config(const std::string& text) {
  try {
    const nlohmann::json j = yaml_to_json(text, "fuzz.yaml");
    parse_train_config(validate_train_config(j));
  } catch (const std::runtime_error&) {
  }
}

TEST(ConfigFuzz, MutatedTrainingConfigsEndInAValueOrANamedError) {
  const std::vector<std::string> seeds = {
      read_file(std::string(KUBETUNE_SOURCE_DIR) + "/examples/default/train.yaml"),
      nlohmann::json::parse(R"({"model": {"path": "m", "gradientCheckpointing": true},
          "data": {"train": "t.jsonl", "maxLength": 512, "packing": true},
          "method": {"type": "qlora", "lora": {"r": 8, "targetModules": ["q_proj", "v_proj"]},
                     "quantization": {"type": "fp4", "blockSize": 128}},
          "training": {"maxSteps": 10, "globalBatchSize": 64, "lrScheduler": "cosine"},
          "output": {"dir": "out"}, "checkpoint": {"resume": "never"}})")
          .dump(1)};
  ASSERT_FALSE(seeds[0].empty());
  Mutator mutator(14);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20000; ++i) {
    const std::string text = mutator.mutate(seeds[static_cast<size_t>(i) % seeds.size()]);
    EXPECT_NO_THROW(load_config(text)) << "case " << i << ":\n" << text;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(120));
}

TEST(ConfigFuzz, MutatedJsonEndsInAValueOrANamedError) {
  const std::string seed = R"({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0, "b": 1},
      "merges": ["a b"]}, "added_tokens": [{"id": 2, "content": "<s>", "special": true}]})";
  Mutator mutator(15);
  for (int i = 0; i < 20000; ++i) {
    const std::string text = mutator.mutate(seed);
    EXPECT_NO_THROW({
      try {
        parse_json_strict(text, "fuzz.json");
      } catch (const std::runtime_error&) {
      }
    }) << text;
  }
}

}  // namespace
}  // namespace kubetune
