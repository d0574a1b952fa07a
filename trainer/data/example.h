#pragma once
// One tokenized training example, the unit that flows from the dataset loader to the batcher.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kubetune::data {

// Hugging Face convention: a label of -100 means "not a target" (ignored by the loss).
constexpr int32_t kIgnoreIndex = -100;

struct Example {
  std::vector<int32_t> input_ids;
  // Same length as input_ids. The loss shifts: position t predicts labels[t + 1], so labels[0] is
  // never predicted.
  std::vector<int32_t> labels;
  size_t source_line = 0;  // 1-based line of the JSONL file the example came from
  // A preference pair (data.format preference): this example is the prompt and the chosen answer,
  // `rejected` the same prompt and the rejected answer; the answers alone are targets. An unpaired
  // example (kto): `rejected` is its KL sequence, the same prompt with another example's
  // completion (preference_pair.h: attach_kl_sequences). Null otherwise.
  std::shared_ptr<const Example> rejected = nullptr;
  // An unpaired example (data.format unpaired_preference): whether its completion is desirable.
  bool desirable = true;
};

// Number of tokens the loss is computed on: labels != -100, excluding position 0 (never predicted).
int64_t count_targets(const Example& example);

}  // namespace kubetune::data
