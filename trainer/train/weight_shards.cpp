#include "trainer/train/weight_shards.h"

#include <torch/torch.h>

#include <algorithm>

namespace kubetune::train {

WeightShards::WeightShards(const std::vector<torch::Tensor>& params, std::vector<std::string> names,
                           const dist::BucketPlan& plan, int rank, int world,
                           const std::function<int64_t(const std::string&)>& stage_of)
    : params_(params), names_(std::move(names)), rank_(rank), world_(world) {
  torch::NoGradGuard no_grad;
  for (const auto& members : plan) {
    Bucket b;
    b.members = members;
    int64_t numel = 0;
    b.first_stage = std::numeric_limits<int64_t>::max();
    for (size_t i : members) {
      b.offsets.push_back(numel);
      numel += params_[i].numel();
      b.first_stage = std::min(b.first_stage, stage_of(names_[i]));
    }
    b.sharded = dist::splits_evenly(numel, world_);
    if (b.sharded) {
      b.mine = dist::shard_of(numel, rank_, world_);
      b.weights = torch::empty({numel}, params_[members.front()].options());
      for (size_t j = 0; j < members.size(); ++j) {
        auto& p = params_[members[j]];
        auto place = b.weights.narrow(0, b.offsets[j], p.numel());
        place.copy_(p.reshape(-1));
        p.set_data(place.view(p.sizes()));
      }
      b.exp_avg = torch::zeros({b.mine.size}, b.weights.options());
      b.exp_avg_sq = torch::zeros({b.mine.size}, b.weights.options());
    }
    buckets_.push_back(std::move(b));
  }
}

std::vector<AdamWParam> WeightShards::optimizer_entries(
    const std::function<bool(const std::string&, const torch::Tensor&)>& decays) {
  std::vector<AdamWParam> entries;
  for (const auto& b : buckets_) {
    for (size_t j = 0; j < b.members.size(); ++j) {
      const auto& p = params_[b.members[j]];
      const auto& name = names_[b.members[j]];
      if (!b.sharded) {
        entries.push_back({name, p, decays(name, p), {}, {}});
        continue;
      }
      // The part of this tensor inside this process's slice, if any.
      const int64_t begin = std::max(b.offsets[j], b.mine.begin);
      const int64_t end = std::min(b.offsets[j] + p.numel(), b.mine.begin + b.mine.size);
      if (begin >= end) continue;
      const int64_t in_slice = begin - b.mine.begin;
      entries.push_back({name, p, decays(name, p), b.exp_avg.narrow(0, in_slice, end - begin),
                         b.exp_avg_sq.narrow(0, in_slice, end - begin), begin - b.offsets[j],
                         end - begin});
    }
  }
  return entries;
}

size_t WeightShards::sharded_buckets() const {
  return std::count_if(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.sharded; });
}

void WeightShards::start_weight_gather(dist::Communicator& comm) {
  wait_for_weights();
  // In the order the next forward reads them, so the first layers' weights arrive first.
  std::vector<Bucket*> order;
  for (auto& b : buckets_)
    if (b.sharded) order.push_back(&b);
  std::stable_sort(order.begin(), order.end(), [](const Bucket* x, const Bucket* y) {
    return x->first_stage < y->first_stage;
  });
  for (Bucket* b : order)
    b->wait_for_gather = comm.start_all_gather_in_place(b->weights, "updated weights (all-gather)");
}

void WeightShards::wait_for_stage(int64_t stage) {
  for (auto& b : buckets_)
    if (b.wait_for_gather && b.first_stage <= stage) {
      b.wait_for_gather();
      b.wait_for_gather = nullptr;
    }
}

std::vector<std::pair<std::string, torch::Tensor>> WeightShards::gather_optimizer_state(
    dist::Communicator& comm, bool keep) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& b : buckets_) {
    if (!b.sharded) continue;
    for (const auto& [suffix, shard] :
         {std::pair{".exp_avg", b.exp_avg}, std::pair{".exp_avg_sq", b.exp_avg_sq}}) {
      auto full = torch::empty({b.weights.numel()}, shard.options());
      full.narrow(0, b.mine.begin, b.mine.size).copy_(shard);
      comm.all_gather_in_place(full, "optimizer state (checkpoint)");
      if (!keep) continue;
      for (size_t j = 0; j < b.members.size(); ++j) {
        const auto& p = params_[b.members[j]];
        out.emplace_back(names_[b.members[j]] + suffix,
                         full.narrow(0, b.offsets[j], p.numel()).view(p.sizes()).to(torch::kCPU));
      }
    }
  }
  return out;
}

}  // namespace kubetune::train
