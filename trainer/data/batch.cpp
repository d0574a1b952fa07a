#include "trainer/data/batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kubetune::data {
namespace {

using Row = std::vector<const Example*>;

int64_t length_of(const Example& example) { return static_cast<int64_t>(example.input_ids.size()); }

int64_t length_of(const Row& row) {
  int64_t total = 0;
  for (const Example* example : row) total += length_of(*example);
  return total;
}

// Lays the rows out left-aligned in a [rows, length] batch filled with padding.
MicroBatch lay_out(const std::vector<Row>& rows, int32_t pad_id) {
  MicroBatch batch;
  batch.batch = static_cast<int64_t>(rows.size());
  for (const Row& row : rows) batch.length = std::max(batch.length, length_of(row));
  const size_t cells = static_cast<size_t>(batch.batch * batch.length);
  batch.input_ids.assign(cells, pad_id);
  batch.position_ids.assign(cells, 0);
  batch.segment_ids.assign(cells, 0);
  batch.labels.assign(cells, kIgnoreIndex);

  for (size_t r = 0; r < rows.size(); ++r) {
    size_t cell = r * static_cast<size_t>(batch.length);
    int64_t segment = 0;
    for (const Example* example : rows[r]) {
      ++segment;
      for (size_t t = 0; t < example->input_ids.size(); ++t, ++cell) {
        batch.input_ids[cell] = example->input_ids[t];
        batch.position_ids[cell] = static_cast<int64_t>(t);
        batch.segment_ids[cell] = segment;
        batch.labels[cell] = t == 0 ? kIgnoreIndex : example->labels[t];
      }
      batch.n_targets += count_targets(*example);
      batch.n_tokens += length_of(*example);
    }
    if (rows[r].size() > 1 || length_of(rows[r]) < batch.length) {
      batch.has_padding_or_packing = true;
    }
  }
  return batch;
}

void check_consistent(const Example& example) {
  if (example.labels.size() != example.input_ids.size()) {
    throw std::invalid_argument("example from line " + std::to_string(example.source_line) +
                                ": labels and input_ids differ in length");
  }
}

}  // namespace

MicroBatch pad_batch(const std::vector<const Example*>& examples, int32_t pad_id) {
  std::vector<Row> rows;
  rows.reserve(examples.size());
  for (const Example* example : examples) {
    check_consistent(*example);
    rows.push_back({example});
  }
  return lay_out(rows, pad_id);
}

MicroBatch pair_batch(const std::vector<const Example*>& pairs, int32_t pad_id) {
  std::vector<const Example*> rows = pairs;
  for (const Example* pair : pairs) {
    if (!pair->rejected)
      throw std::invalid_argument("example from line " + std::to_string(pair->source_line) +
                                  " is not a preference pair");
    rows.push_back(pair->rejected.get());
  }
  MicroBatch batch = pad_batch(rows, pad_id);
  batch.pairs = static_cast<int64_t>(pairs.size());
  return batch;
}

std::vector<int64_t> whole_sequence_labels(const MicroBatch& batch, int64_t rows) {
  const auto cells = static_cast<size_t>(rows * batch.length);
  std::vector<int64_t> labels(cells, kIgnoreIndex);
  for (size_t cell = 0; cell < cells; ++cell)
    if (batch.segment_ids[cell] != 0) labels[cell] = batch.input_ids[cell];
  return labels;
}

MicroBatch pack_batch(const std::vector<const Example*>& examples, int64_t max_length,
                      int32_t pad_id) {
  if (max_length < 1) throw std::invalid_argument("pack_batch: max_length must be positive");
  std::vector<Row> rows;
  std::vector<int64_t> used;  // tokens already in each row
  for (const Example* example : examples) {
    check_consistent(*example);
    const int64_t length = length_of(*example);
    if (length > max_length) {
      throw std::runtime_error("example from line " + std::to_string(example->source_line) +
                               " has " + std::to_string(length) +
                               " tokens, more than the packing length " +
                               std::to_string(max_length) + " (data.maxLength)");
    }
    size_t r = 0;
    while (r < rows.size() && used[r] + length > max_length) ++r;
    if (r == rows.size()) {
      rows.emplace_back();
      used.push_back(0);
    }
    rows[r].push_back(example);
    used[r] += length;
  }
  return lay_out(rows, pad_id);
}

}  // namespace kubetune::data
