// distributed.sharding optimizer: ZeRO stage 2 across the data-parallel processes (Rajbhandari et
// al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", 2020): each process
// keeps AdamW's state for, and updates, only its 1/N share of the weights. See weight_sync.h for
// the interface.
//
// Why: with an all-reduce every process holds all of AdamW's state (8 bytes per weight) and
// repeats the whole update: for Llama-3.2-1B full fine-tuning, 9.9 GB and 14.5 ms per step on
// every H200. Sharded, the gradients are reduce-scattered inside backward (half an all-reduce's
// traffic competes with backward for the GPU), each process updates its slice, and the updated
// slices are all-gathered.
//
// How: the weights of each gradient bucket move into one flat buffer laid out like the bucket
// (a FlatShard, flat_shard.h), so slice r of the bucket's gradients and slice r of the flat weights
// are the same elements, and the all-gather writes straight into the weights. A bucket that does
// not split into N equal slices is all-reduced and updated whole by every process, as without
// sharding.
#pragma once

#include <functional>
#include <limits>

#include "trainer/parallel/bucketed_gradients.h"
#include "trainer/parallel/weight_sync.h"

namespace kubetune::parallel {

class OptimizerSharding : public WeightSync {
 public:
  // The bucketed tensors' storage moves into the flat buffers (same values; every holder of the
  // tensors sees the move). Sets the model's before_stage, so each forward stage waits only for
  // the gathers of its own weights.
  OptimizerSharding(Communicator& comm, model::CausalLM& model, const model::NamedParams& trainable,
                    std::unique_ptr<BucketedGradients> buckets);
  ~OptimizerSharding() override;
  OptimizerSharding(const OptimizerSharding&) = delete;
  OptimizerSharding& operator=(const OptimizerSharding&) = delete;

  // Its slice of each sharded bucket (one entry per tensor the slice touches), every tensor of
  // the other buckets and the tensors outside the buckets whole.
  std::vector<optim::AdamWParam> optimizer_entries(const DecayRule& decays) override;
  bool splits_optimizer() const override { return true; }
  std::string describe() const override;
  // Starts sending every process's updated slices to every process (after_update's). The gathers
  // overlap with the forward, whose stages wait only for their own buckets.
  void begin_step(const RowIds& rows) override;
  torch::Tensor empty_batch_loss(int32_t) override;
  void finish_gradients() override { buckets_->finish_step(); }
  // The updated slices' gathers are due, and start with the next step, not here: the step begins
  // with a small all-reduce (its target-token count) that the forward waits for, and queued
  // behind 2.5 GB of gathers on the communicator's stream it held the whole forward back until
  // they were done (1B full fine-tuning on 2 H200s: 10 ms a step, bench/README.md).
  void after_update() override { gathers_due_ = true; }
  void wait_for_weights() override;

 private:
  struct Bucket {
    FlatShard shard;                        // `flat` and the moments only where `sharded`
    bool sharded = false;                   // it splits into N equal slices
    int64_t first_stage = 0;                // the first model stage that reads its weights
    std::function<void()> wait_for_gather;  // set while its gather is in flight
  };
  void wait_for_stage(int64_t stage);
  void start_gathers();

  Communicator& comm_;
  model::CausalLM model_;
  model::NamedParams trainable_;
  std::unique_ptr<BucketedGradients> buckets_;
  std::vector<Bucket> flat_buckets_;  // one per gradient bucket, in the same order
  bool gathers_due_ = false;          // updated, not yet sent
};

}  // namespace kubetune::parallel
