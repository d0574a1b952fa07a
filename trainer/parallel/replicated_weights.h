// distributed.sharding none (or one process): DDP. Every process holds every weight and its AdamW
// state and repeats the whole update; gradients are summed across processes in buckets during
// backward (bucketed_gradients.h). See weight_sync.h for the interface.
#pragma once

#include "trainer/parallel/bucketed_gradients.h"
#include "trainer/parallel/weight_sync.h"

namespace kubetune::parallel {

class ReplicatedWeights : public WeightSync {
 public:
  ReplicatedWeights(const model::NamedParams& trainable,
                    std::unique_ptr<BucketedGradients> buckets);

  std::vector<optim::AdamWParam> optimizer_entries(const DecayRule& decays) override;
  bool splits_optimizer() const override { return false; }
  std::string describe() const override { return {}; }
  void begin_step(const RowIds& rows) override { buckets_->begin_step(rows); }
  torch::Tensor empty_batch_loss(int32_t) override { return zero_loss(trainable_); }
  void finish_gradients() override { buckets_->finish_step(); }

 private:
  model::NamedParams trainable_;
  std::unique_ptr<BucketedGradients> buckets_;
};

}  // namespace kubetune::parallel
