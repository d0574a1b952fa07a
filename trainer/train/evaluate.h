// Scoring a model on examples: mean next-token loss (token-weighted) and per-example results.
#pragma once

#include <torch/types.h>

#include <vector>

#include "trainer/data/example.h"
#include "trainer/dist/communicator.h"
#include "trainer/model/causal_lm.h"

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

// With a communicator, each rank scores every world_size-th example and the totals are summed.
EvalResult evaluate(model::CausalLMImpl& model, const std::vector<data::Example>& examples,
                    int micro_batch, int32_t pad_id, const torch::Device& device,
                    torch::Dtype dtype, dist::Communicator* comm);

}  // namespace kubetune::train
