#pragma once
// Turning examples into rectangular micro-batches, by padding or by packing.
//
// Both layouts set the label at the first position of every example to -100: the loss shifts
// (position t predicts labels[t + 1]), and in a packed row the last token of one example must not
// be asked to predict the first token of the next. count_targets() already excludes position 0,
// so n_targets is the same either way.

#include <cstdint>
#include <vector>

#include "trainer/data/example.h"

namespace kubetune::data {

struct MicroBatch {
  int64_t batch = 0, length = 0;
  // Row-major [batch, length].
  std::vector<int64_t> input_ids;
  std::vector<int64_t> position_ids;  // restart at 0 for every example; 0 on padding
  std::vector<int64_t> segment_ids;   // 0 = padding, k > 0 = k-th example of that row
  std::vector<int64_t> labels;        // -100 on padding and at each example's first position
  int64_t n_targets = 0;              // sum of count_targets over the examples
  int64_t n_tokens = 0;               // non-padding tokens
  // Preference pairs (pair_batch): rows [0, pairs) hold the chosen answers, rows [pairs,
  // 2 pairs) the rejected ones in the same order; 0 otherwise.
  int64_t pairs = 0;
  // False only when every row holds exactly one example and no padding, so the model can use a
  // plain causal mask.
  bool has_padding_or_packing = false;
};

// Each example in its own row, right-padded with pad_id to the longest one.
MicroBatch pad_batch(const std::vector<const Example*>& examples, int32_t pad_id);

// Preference pairs, as TRL's collator lays them out: every chosen sequence, then every rejected
// one, each in its own row, right-padded. Throws std::invalid_argument for an example that is not
// a pair.
MicroBatch pair_batch(const std::vector<const Example*>& pairs, int32_t pad_id);

// Labels that make every token of the first `rows` rows a target (padding excepted): ORPO's NLL is
// over the chosen sequences whole, prompt included. [rows, length], row-major.
std::vector<int64_t> whole_sequence_labels(const MicroBatch& batch, int64_t rows);

// First-fit packing, in the given order, of examples into rows of at most max_length tokens; an
// example is never split across rows. The batch length is the fullest row's length. Throws
// std::runtime_error if an example is longer than max_length.
MicroBatch pack_batch(const std::vector<const Example*>& examples, int64_t max_length,
                      int32_t pad_id);

}  // namespace kubetune::data
