#include "trainer/parallel/replicated_weights.h"

namespace kubetune::parallel {

ReplicatedWeights::ReplicatedWeights(const model::NamedParams& trainable,
                                     std::unique_ptr<BucketedGradients> buckets)
    : trainable_(trainable), buckets_(std::move(buckets)) {
  buckets_->attach(Communicator::Reduction::kAllReduce);
}

std::vector<optim::AdamWParam> ReplicatedWeights::optimizer_entries(const DecayRule& decays) {
  return whole_entries(trainable_, decays);
}

}  // namespace kubetune::parallel
