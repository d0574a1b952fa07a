// Scoring a model on examples: mean next-token loss (token-weighted) and per-example results.
#pragma once

#include <torch/types.h>

#include <vector>

#include "trainer/data/example.h"
#include "trainer/model/causal_lm.h"
#include "trainer/parallel/communicator.h"

namespace kubetune::train {

struct ExampleScore {
  double loss_sum = 0;
  int64_t n_targets = 0;
  int64_t n_correct = 0;  // targets where the argmax prediction is the target
};

struct EvalResult {
  double mean_loss = 0;  // sum of losses / sum of targets, over all examples (and ranks)
  double accuracy = 0;   // argmax accuracy over all targets
  int64_t n_targets = 0;
  std::vector<ExampleScore>
      per_example;  // this process's examples, in order (all when comm is null)
};

// This process's share of `n` examples (every world-th from `rank`), `micro_batch` at a time, then
// empty batches up to the count of the process with the most: with fully sharded weights each
// forward gathers from the peers, so every process runs as many (an empty batch: pad_forward).
std::vector<std::vector<size_t>> forward_batches(size_t n, int rank, int world,
                                                 int64_t micro_batch);
// A forward on one padding token, for a process that has nothing left to score.
void pad_forward(model::CausalLMImpl& model, int32_t pad_id, const torch::Device& device);

// With a communicator, each rank scores every world_size-th example and the totals are summed.
EvalResult evaluate(model::CausalLMImpl& model, const std::vector<data::Example>& examples,
                    int micro_batch, int32_t pad_id, const torch::Device& device,
                    torch::Dtype dtype, parallel::Communicator* comm);

// The model's own answer to an example, for people to read: greedy decoding from the example's
// prompt (its tokens before the first target), as many tokens as the example has targets (no
// cache: for showing a few held-out examples, not for serving).
std::vector<int32_t> greedy_answer(model::CausalLMImpl& model, const data::Example& example,
                                   const torch::Device& device, torch::Dtype dtype);

// The example's reference answer: its target tokens.
std::vector<int32_t> reference_answer(const data::Example& example);

// The example's prompt: its tokens before the first target.
std::vector<int32_t> prompt_of(const data::Example& example);

}  // namespace kubetune::train
