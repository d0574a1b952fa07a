// ZeRO stage 2 across the data-parallel processes (Rajbhandari et al., "ZeRO: Memory
// Optimizations Toward Training Trillion Parameter Models", 2020): each process keeps AdamW's
// state for, and updates, only its 1/N share of the weights.
//
// Why: with an all-reduce every process holds all of AdamW's state (8 bytes per weight) and
// repeats the whole update: for Llama-3.2-1B full fine-tuning, 9.9 GB and 14.5 ms per step on
// every H200. Sharded, the gradients are reduce-scattered inside backward (half an all-reduce's
// traffic competes with backward for the GPU), each process updates its slice, and the updated
// slices are all-gathered.
//
// How: the weights of each gradient bucket move into one flat buffer laid out like the bucket
// (gradient_buckets.h), so slice r of the bucket's gradients and slice r of the flat weights are
// the same elements, and the all-gather writes straight into the weights. A bucket that does not
// split into N equal slices is all-reduced and updated whole by every process, as without
// sharding.
#pragma once

#include <torch/types.h>

#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "trainer/dist/communicator.h"
#include "trainer/dist/gradient_buckets.h"
#include "trainer/train/adamw.h"

namespace kubetune::train {

class WeightShards {
 public:
  // `params` and `names`: the tensors in the gradient buckets of `plan`. Their storage moves into
  // the flat buffers (same values; every holder of the tensors sees the move).
  // `stage_of(name)`: the model stage (CausalLMImpl::before_stage) that first reads that tensor.
  WeightShards(const std::vector<torch::Tensor>& params, std::vector<std::string> names,
               const dist::BucketPlan& plan, int rank, int world,
               const std::function<int64_t(const std::string&)>& stage_of);

  // What this process's AdamW updates: its slice of each sharded bucket (one entry per tensor the
  // slice touches, state allocated here) and every tensor of the other buckets whole.
  std::vector<AdamWParam> optimizer_entries(
      const std::function<bool(const std::string&, const torch::Tensor&)>& decays);

  size_t buckets() const { return buckets_.size(); }
  size_t sharded_buckets() const;

  // After AdamW's step: starts sending every process's updated slices to every process. The
  // gathers overlap with the next forward, whose stages wait only for their own buckets
  // (wait_for_stage, from CausalLMImpl::before_stage); anything else that reads the weights
  // first calls wait_for_weights().
  void start_weight_gather(dist::Communicator& comm);
  void wait_for_stage(int64_t stage);
  void wait_for_weights() { wait_for_stage(std::numeric_limits<int64_t>::max()); }

  // The full-size "<name>.exp_avg" / ".exp_avg_sq" of the sharded buckets' tensors, gathered
  // from all processes (a collective: every process calls it). Only `keep` processes get them
  // (copied to the host); the others get nothing.
  std::vector<std::pair<std::string, torch::Tensor>> gather_optimizer_state(
      dist::Communicator& comm, bool keep);

 private:
  struct Bucket {
    std::vector<size_t> members;   // indices into params_, in the bucket's order
    std::vector<int64_t> offsets;  // of each member in `weights`
    torch::Tensor weights;         // flat; sharded buckets only (the members are views into it)
    bool sharded = false;
    dist::Slice mine{0, 0};                 // this process's slice of `weights`
    torch::Tensor exp_avg, exp_avg_sq;      // of `mine`
    int64_t first_stage = 0;                // the first model stage that reads its weights
    std::function<void()> wait_for_gather;  // set while its gather is in flight
  };

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<Bucket> buckets_;
  int rank_, world_;
};

}  // namespace kubetune::train
