#include "trainer/parallel/weight_sync.h"

#include "trainer/device/device.h"
#include "trainer/parallel/full_sharding.h"
#include "trainer/parallel/optimizer_sharding.h"
#include "trainer/parallel/replicated_weights.h"

namespace kubetune::parallel {

std::vector<optim::AdamWParam> whole_entries(
    const model::NamedParams& tensors, const DecayRule& decays,
    const std::function<bool(const torch::Tensor&)>& skip) {
  std::vector<optim::AdamWParam> entries;
  for (size_t i = 0; i < tensors.tensors.size(); ++i) {
    const auto& t = tensors.tensors[i];
    if (!skip || !skip(t))
      entries.push_back({tensors.names[i], t, decays(tensors.names[i], t), {}, {}});
  }
  return entries;
}

void WeightSync::restore_weights(const model::NamedParams& trainable, const WeightReader& read) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < trainable.names.size(); ++i)
    if (!splits(trainable.tensors[i])) trainable.tensors[i].copy_(read(trainable.names[i]));
}

std::vector<torch::Tensor> WeightSync::held_whole(const model::NamedParams& trainable) const {
  std::vector<torch::Tensor> whole;
  for (const auto& t : trainable.tensors)
    if (!splits(t)) whole.push_back(t);
  return whole;
}

// The one place that reads distributed.sharding (with make_weight_sync below).
WeightLoading::WeightLoading(const TrainConfig& c, Communicator& comm,
                             std::optional<torch::ScalarType> autocast) {
  if (c.distributed.sharding != api::DistributedSharding::kFull) return;
  full_ = std::make_unique<FullSharding>(
      comm, c.method.type == api::MethodType::kFull,
      train::gathered_products_dtype(c, comm.world_size(), autocast));
}

WeightLoading::~WeightLoading() = default;

void WeightLoading::part_loaded(const std::string& prefix, torch::nn::Module& part) {
  if (full_) full_->take_part(prefix, part);
}

std::unique_ptr<WeightSync> make_weight_sync(const TrainConfig& c, Communicator& comm,
                                             model::CausalLM& model,
                                             const model::NamedParams& trainable,
                                             WeightLoading& loading) {
  const double bucket_mb = c.distributed.bucket_size_mb;
  if (c.distributed.sharding == api::DistributedSharding::kFull) {
    TORCH_CHECK(loading.full_, "distributed.sharding full: the model did not load through it");
    loading.full_->attach(model, trainable, bucket_mb);
    return std::move(loading.full_);
  }
  // A trainable embedding of a multi-process run has its gradient summed by the rows the step
  // looked up (embedding_gradient_sync.h).
  const bool embedding_by_rows = comm.world_size() > 1 &&
                                 c.distributed.sparse_embedding_gradients &&
                                 model->model->embed_tokens->weight.requires_grad();
  auto buckets =
      std::make_unique<BucketedGradients>(comm, model, trainable, bucket_mb, embedding_by_rows);
  if (comm.world_size() > 1 && c.distributed.sharding == api::DistributedSharding::kOptimizer)
    return std::make_unique<OptimizerSharding>(comm, model, trainable, std::move(buckets));
  return std::make_unique<ReplicatedWeights>(trainable, std::move(buckets));
}

}  // namespace kubetune::parallel
