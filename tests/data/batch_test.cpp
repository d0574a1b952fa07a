// pad_batch / pack_batch invariants on synthetic examples.
#include "trainer/data/batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

namespace kubetune::data {
namespace {

constexpr int32_t kPad = 999;

// An example whose ids encode (line, position) so misplaced tokens are visible, and whose labels
// mask a pseudo-random prefix and some scattered positions.
Example make_example(size_t line, size_t length, uint32_t seed) {
  std::mt19937 rng(seed);
  Example e;
  e.source_line = line;
  const size_t prompt = rng() % length;
  for (size_t t = 0; t < length; ++t) {
    const auto id = static_cast<int32_t>(line * 1000 + t);
    e.input_ids.push_back(id);
    e.labels.push_back(t < prompt || rng() % 5 == 0 ? kIgnoreIndex : id);
  }
  return e;
}

std::vector<Example> make_examples(const std::vector<size_t>& lengths) {
  std::vector<Example> examples;
  for (size_t i = 0; i < lengths.size(); ++i)
    examples.push_back(make_example(i + 1, lengths[i], 7 * i + 1));
  return examples;
}

std::vector<const Example*> pointers(const std::vector<Example>& examples) {
  std::vector<const Example*> out;
  for (const auto& e : examples) out.push_back(&e);
  return out;
}

// Which examples (by source_line) each row holds, in order.
using Layout = std::vector<std::vector<size_t>>;

// Checks every cell of the batch against the examples and returns the layout it found.
Layout check_invariants(const MicroBatch& b, const std::vector<Example>& examples) {
  std::map<size_t, const Example*> by_line;
  for (const auto& e : examples) by_line[e.source_line] = &e;
  const size_t cells = static_cast<size_t>(b.batch * b.length);
  EXPECT_EQ(b.input_ids.size(), cells);
  EXPECT_EQ(b.position_ids.size(), cells);
  EXPECT_EQ(b.segment_ids.size(), cells);
  EXPECT_EQ(b.labels.size(), cells);

  Layout layout(static_cast<size_t>(b.batch));
  int64_t targets = 0, tokens = 0, loss_cells = 0;
  bool padded_or_packed = false;
  for (int64_t r = 0; r < b.batch; ++r) {
    int64_t c = 0;
    int64_t segment = 0;
    while (c < b.length && b.segment_ids[r * b.length + c] != 0) {
      const size_t cell = static_cast<size_t>(r * b.length + c);
      EXPECT_EQ(b.segment_ids[cell], ++segment) << "segments number 1, 2, ... per row";
      const size_t line = static_cast<size_t>(b.input_ids[cell] / 1000);
      EXPECT_TRUE(by_line.count(line)) << "unknown token " << b.input_ids[cell];
      if (!by_line.count(line)) return layout;
      const Example& e = *by_line[line];
      layout[r].push_back(line);
      for (size_t t = 0; t < e.input_ids.size(); ++t, ++c) {
        const size_t i = static_cast<size_t>(r * b.length + c);
        if (c >= b.length) {
          ADD_FAILURE() << "example from line " << line << " split across rows";
          return layout;
        }
        EXPECT_EQ(b.input_ids[i], e.input_ids[t]);
        EXPECT_EQ(b.position_ids[i], static_cast<int64_t>(t)) << "positions restart per example";
        EXPECT_EQ(b.segment_ids[i], segment);
        EXPECT_EQ(b.labels[i], t == 0 ? kIgnoreIndex : e.labels[t]);
      }
      targets += count_targets(e);
      tokens += static_cast<int64_t>(e.input_ids.size());
    }
    if (segment > 1 || c < b.length) padded_or_packed = true;
    for (; c < b.length; ++c) {  // the rest of the row is padding
      const size_t i = static_cast<size_t>(r * b.length + c);
      EXPECT_EQ(b.segment_ids[i], 0);
      EXPECT_EQ(b.input_ids[i], kPad);
      EXPECT_EQ(b.labels[i], kIgnoreIndex);
    }
  }
  // The shifted loss (position c-1 predicts labels[c]) never crosses an example boundary.
  for (size_t i = 0; i < cells; ++i) {
    if (b.labels[i] == kIgnoreIndex) continue;
    ++loss_cells;
    EXPECT_NE(i % static_cast<size_t>(b.length), 0u);
    if (i % static_cast<size_t>(b.length) != 0) {
      EXPECT_EQ(b.segment_ids[i - 1], b.segment_ids[i]);
    }
  }
  EXPECT_EQ(b.n_targets, targets);
  EXPECT_EQ(loss_cells, targets);
  EXPECT_EQ(b.n_tokens, tokens);
  EXPECT_EQ(b.has_padding_or_packing, padded_or_packed);
  return layout;
}

std::vector<size_t> lines_in(const Layout& layout) {
  std::vector<size_t> lines;
  for (const auto& row : layout) lines.insert(lines.end(), row.begin(), row.end());
  std::sort(lines.begin(), lines.end());
  return lines;
}

TEST(PadBatch, OneRowPerExampleRightPadded) {
  const auto examples = make_examples({5, 9, 1, 7});
  const MicroBatch b = pad_batch(pointers(examples), kPad);
  EXPECT_EQ(b.batch, 4);
  EXPECT_EQ(b.length, 9);
  EXPECT_EQ(check_invariants(b, examples), (Layout{{1}, {2}, {3}, {4}}));
  EXPECT_TRUE(b.has_padding_or_packing);
}

TEST(PadBatch, EqualLengthsNeedNoMask) {
  const auto examples = make_examples({6, 6});
  const MicroBatch b = pad_batch(pointers(examples), kPad);
  check_invariants(b, examples);
  EXPECT_FALSE(b.has_padding_or_packing);
}

TEST(PadBatch, EmptyListGivesEmptyBatch) {
  const MicroBatch b = pad_batch({}, kPad);
  EXPECT_EQ(b.batch, 0);
  EXPECT_EQ(b.n_targets, 0);
  EXPECT_TRUE(b.input_ids.empty());
}

TEST(PackBatch, FirstFitInOrder) {
  // 6 opens row 1, 5 opens row 2, 4 fits row 1 (10), 3 fits row 2 (8), 2 fits row 2 (10).
  const auto examples = make_examples({6, 5, 4, 3, 2});
  const MicroBatch b = pack_batch(pointers(examples), 10, kPad);
  EXPECT_EQ(b.batch, 2);
  EXPECT_EQ(b.length, 10);
  EXPECT_EQ(check_invariants(b, examples), (Layout{{1, 3}, {2, 4, 5}}));
  EXPECT_TRUE(b.has_padding_or_packing);
}

TEST(PackBatch, RandomSizesKeepInvariants) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t max_length = 8 + static_cast<int64_t>(rng() % 40);
    std::vector<size_t> lengths(1 + rng() % 12);
    for (auto& length : lengths) length = 1 + rng() % static_cast<size_t>(max_length);
    const auto examples = make_examples(lengths);
    const MicroBatch b = pack_batch(pointers(examples), max_length, kPad);
    EXPECT_LE(b.length, max_length);
    const Layout layout = check_invariants(b, examples);
    std::vector<size_t> all(examples.size());
    std::iota(all.begin(), all.end(), size_t{1});
    EXPECT_EQ(lines_in(layout), all) << "every example exactly once";
    for (const auto& row : layout) EXPECT_TRUE(std::is_sorted(row.begin(), row.end()));
  }
}

TEST(PackBatch, RejectsExampleLongerThanRow) {
  const auto examples = make_examples({4, 11});
  try {
    pack_batch(pointers(examples), 10, kPad);
    ADD_FAILURE() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kubetune::data
