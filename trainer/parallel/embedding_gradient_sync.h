// A trainable embedding's gradient, summed across processes over the rows a step looked up
// instead of over the whole [vocab, hidden] matrix.
//
// Why: the lookup's gradient is the last one backward produces, so the DDP bucket that holds the
// embedding is all-reduced after everything else, with nothing left to overlap it: 1 GB of fp32
// for Llama-3.2-1B (tied), 2 GB for Llama-3.1-8B (untied). Only rows of tokens in the step's
// global batch can be non-zero, and every rank knows which those are from the sampler without
// asking the others. So the lookup's gradient is collected in those rows
// (model::EmbeddingRowGradients), summed in one all-reduce of [rows, hidden] at the end of the
// step and added to the weight's gradient. A tied weight's output-layer part, complete at the
// start of backward, still goes through the DDP buckets and overlaps with the rest of backward.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "trainer/data/example.h"
#include "trainer/model/layers.h"
#include "trainer/parallel/communicator.h"

namespace kubetune::parallel {

// Sorted, unique token ids of the examples at `indices`, plus `pad_id` (padding is looked up too).
std::vector<int64_t> token_ids_in(const std::vector<data::Example>& examples,
                                  const std::vector<size_t>& indices, int32_t pad_id);

class EmbeddingGradientSync {
 public:
  // From now on the embedding's backward gives its weight no gradient through autograd; the
  // weight's gradient is completed by finish_step().
  EmbeddingGradientSync(model::Embedding embedding, parallel::Communicator& comm);

  // Before the step's first forward: every id any rank may look up in this step, sorted, unique
  // and the same on every rank.
  void begin_step(const std::vector<int64_t>& row_ids);

  // After the step's last backward (and DDP's all-reduce): sums the rows over ranks and adds
  // them to the weight's gradient. Every rank must call it once per step.
  void finish_step();

 private:
  model::Embedding embedding_;
  parallel::Communicator& comm_;
  std::shared_ptr<model::EmbeddingRowGradients> rows_;
};

}  // namespace kubetune::parallel
