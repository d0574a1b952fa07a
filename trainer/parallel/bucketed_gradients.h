// The trainable tensors whose gradients c10d's Reducer sums across processes in buckets during
// backward (as torch DDP does), and a trainable embedding whose gradient is summed by rows
// instead (embedding_gradient_sync.h). Every scheme of weight_sync.h has one: replicated and
// optimizer-sharded weights for all their trainable tensors, fully sharded ones for what stays
// whole (LoRA's adapters).
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

#include "trainer/model/causal_lm.h"
#include "trainer/model/named_params.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/embedding_gradient_sync.h"
#include "trainer/parallel/gradient_buckets.h"

namespace kubetune::parallel {

class BucketedGradients {
 public:
  // `reduced_elsewhere(t)`: tensors another mechanism reduces (fully sharded units) stay out.
  // `embedding_by_rows`: a trainable embedding's lookup gradient is summed by rows.
  BucketedGradients(Communicator& comm, model::CausalLM& model, const model::NamedParams& trainable,
                    double bucket_mb, bool embedding_by_rows,
                    const std::function<bool(const torch::Tensor&)>& reduced_elsewhere = {});

  // The bucketed tensors in the order backward produces their gradients, and their buckets.
  const model::NamedParams& tensors() const { return tensors_; }
  const BucketPlan& plan() const { return plan_; }
  bool contains(const torch::Tensor& t) const;

  // Hands the buckets to the communicator's Reducer. Last: a scheme that moves the tensors'
  // storage (optimizer_sharding.h) does so first.
  void attach(Communicator::Reduction reduction);

  void begin_step(const std::function<std::vector<int64_t>()>& rows);
  void finish_step();

 private:
  Communicator& comm_;
  std::unique_ptr<EmbeddingGradientSync> embedding_rows_;  // null: the embedding is bucketed
  model::NamedParams tensors_;
  BucketPlan plan_;
};

// A loss whose backward gives each of `trainable` a zero gradient without reading its values.
torch::Tensor zero_loss(const model::NamedParams& trainable);

}  // namespace kubetune::parallel
