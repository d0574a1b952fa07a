#include "trainer/parallel/optimizer_sharding.h"

#include <torch/torch.h>

#include <algorithm>

namespace kubetune::parallel {
namespace {

// The stage of CausalLMImpl::before_stage that first reads the tensor `name`.
int64_t model_stage_of(const std::string& name, int64_t layers) {
  if (name.rfind("model.embed_tokens.", 0) == 0) return -1;
  return model::decoder_layer_of(name).value_or(layers);  // else the final norm and output layer
}

}  // namespace

OptimizerSharding::OptimizerSharding(Communicator& comm, model::CausalLM& model,
                                     const model::NamedParams& trainable,
                                     std::unique_ptr<BucketedGradients> buckets)
    : comm_(comm), model_(model), trainable_(trainable), buckets_(std::move(buckets)) {
  const int64_t layers = model->config().num_hidden_layers;
  const auto& bucketed = buckets_->tensors();
  for (const auto& members : buckets_->plan()) {
    Bucket b;
    b.first_stage = std::numeric_limits<int64_t>::max();
    for (size_t i : members) {
      b.shard.add(bucketed.names[i], bucketed.tensors[i]);
      b.first_stage = std::min(b.first_stage, model_stage_of(bucketed.names[i], layers));
    }
    b.sharded = splits_evenly(b.shard.numel, comm.world_size());
    if (b.sharded) {
      b.shard.move_into_flat(b.shard.numel, comm.rank(), comm.world_size());
      b.shard.allocate_moments(b.shard.flat.scalar_type());
    }
    flat_buckets_.push_back(std::move(b));
  }
  model->before_stage = [this](int64_t stage) { wait_for_stage(stage); };
  buckets_->attach(Communicator::Reduction::kReduceScatter);
}

OptimizerSharding::~OptimizerSharding() { model_->before_stage = nullptr; }

std::vector<optim::AdamWParam> OptimizerSharding::optimizer_entries(const DecayRule& decays) {
  std::vector<optim::AdamWParam> entries;
  for (const auto& b : flat_buckets_) {
    auto bucket = b.sharded ? b.shard.optimizer_entries(decays)
                            : whole_entries({b.shard.names, b.shard.members}, decays);
    entries.insert(entries.end(), bucket.begin(), bucket.end());
  }
  auto outside = whole_entries(trainable_, decays,
                               [this](const torch::Tensor& t) { return buckets_->contains(t); });
  entries.insert(entries.end(), outside.begin(), outside.end());
  return entries;
}

std::string OptimizerSharding::describe() const {
  const auto sharded = std::count_if(flat_buckets_.begin(), flat_buckets_.end(),
                                     [](const Bucket& b) { return b.sharded; });
  return "optimizer sharded across processes (" + std::to_string(sharded) + " of " +
         std::to_string(flat_buckets_.size()) + " buckets)";
}

torch::Tensor OptimizerSharding::empty_batch_loss(int32_t) {
  wait_for_weights();
  return zero_loss(trainable_);
}

void OptimizerSharding::begin_step(const RowIds& rows) {
  start_gathers();
  buckets_->begin_step(rows);
}

void OptimizerSharding::wait_for_weights() {
  start_gathers();
  wait_for_stage(std::numeric_limits<int64_t>::max());
}

void OptimizerSharding::start_gathers() {
  if (!gathers_due_) return;
  gathers_due_ = false;
  wait_for_stage(std::numeric_limits<int64_t>::max());  // none is still in flight; to be sure
  // In the order the forward reads them, so the first layers' weights arrive first.
  std::vector<Bucket*> order;
  for (auto& b : flat_buckets_)
    if (b.sharded) order.push_back(&b);
  std::stable_sort(order.begin(), order.end(), [](const Bucket* x, const Bucket* y) {
    return x->first_stage < y->first_stage;
  });
  for (Bucket* b : order)
    b->wait_for_gather =
        comm_.start_all_gather_in_place(b->shard.flat, "updated weights (all-gather)");
}

void OptimizerSharding::wait_for_stage(int64_t stage) {
  for (auto& b : flat_buckets_)
    if (b.wait_for_gather && b.first_stage <= stage) {
      b.wait_for_gather();
      b.wait_for_gather = nullptr;
    }
}

}  // namespace kubetune::parallel
