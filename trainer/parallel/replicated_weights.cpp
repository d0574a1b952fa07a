#include "trainer/parallel/replicated_weights.h"

namespace kubetune::parallel {

ReplicatedWeights::ReplicatedWeights(const model::NamedParams& trainable,
                                     std::unique_ptr<BucketedGradients> buckets)
    : trainable_(trainable), buckets_(std::move(buckets)) {
  buckets_->attach(Communicator::Reduction::kAllReduce);
}

std::vector<optim::AdamWParam> ReplicatedWeights::optimizer_entries(const DecayRule& decays) {
  std::vector<optim::AdamWParam> entries;
  for (size_t i = 0; i < trainable_.tensors.size(); ++i) {
    const auto& t = trainable_.tensors[i];
    entries.push_back({trainable_.names[i], t, decays(trainable_.names[i], t), {}, {}});
  }
  return entries;
}

}  // namespace kubetune::parallel
