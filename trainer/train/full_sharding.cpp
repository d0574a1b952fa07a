#include "trainer/train/full_sharding.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <sstream>

namespace kubetune::train {

struct FullSharding::Unit {
  std::string name;                    // "model.layers.3", or "root"
  std::vector<torch::Tensor> members;  // views into `flat`
  std::vector<std::string> names;
  std::vector<int64_t> offsets;  // of each member in `flat`
  int64_t numel = 0;             // of the members; `flat` is padded to a multiple of the world
  dist::Slice mine{0, 0};        // this process's slice of `flat`
  torch::Tensor flat;            // its storage exists only while gathered (one process: always)
  torch::Tensor shard;           // this process's slice: the master copy AdamW updates
  torch::Tensor exp_avg, exp_avg_sq;  // of `shard`; trainable units only
  bool trainable = false;             // every member trains (full), or none does (lora's base)
  bool gathered = false;
  std::function<void()> wait_for_gather;  // set while the gather is in flight
  size_t gradients_ready = 0;             // members whose gradient arrived in this backward
};

namespace {

// The storage under a tensor and all its views, emptied or given `bytes` again (uninitialised).
// Autograd's saved references keep pointing at the same storage (FSDP's _free_storage).
void free_storage(const torch::Tensor& t) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& t) {
  // The caching allocator allocates on the current device, which on the main thread is not
  // necessarily this process's GPU.
  const c10::DeviceGuard on_its_device(t.device());
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  s->set_data_ptr_noswap(s->allocator()->allocate(bytes));
  s->set_nbytes(bytes);
}

// The unit of a parameter name: 1 + l for "model.layers.<l>.", 0 (the root) for the rest.
size_t unit_of(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return 0;
  return 1 + std::stoul(name.substr(prefix.size()));
}

}  // namespace

FullSharding::FullSharding(model::CausalLM& model, dist::Communicator& comm,
                           const std::function<bool(const torch::Tensor&)>& split)
    : comm_(comm), model_(model), rank_(comm.rank()), world_(comm.world_size()) {
  torch::NoGradGuard no_grad;
  const int64_t layers = model->config().num_hidden_layers;
  for (int64_t u = 0; u <= layers; ++u) {
    units_.push_back(std::make_unique<Unit>());
    units_.back()->name = u == 0 ? "root" : "model.layers." + std::to_string(u - 1);
  }
  for (const auto& item : model->named_parameters()) {
    if (!split(item.value())) continue;
    Unit& u = *units_.at(unit_of(item.key()));
    TORCH_CHECK(u.members.empty() || u.trainable == item.value().requires_grad(), u.name,
                " mixes trainable and frozen tensors (", item.key(),
                "): distributed.sharding full splits units that are all one or the other");
    TORCH_CHECK(u.members.empty() || item.value().options().type_equal(u.members[0].options()),
                u.name, " mixes dtypes or devices (", item.key(), ")");
    u.trainable = item.value().requires_grad();
    u.members.push_back(item.value());
    u.names.push_back(item.key());
    u.offsets.push_back(u.numel);
    u.numel += item.value().numel();
  }
  for (auto& unit : units_) {
    Unit& u = *unit;
    if (u.numel == 0) continue;
    const int64_t padded = (u.numel + world_ - 1) / world_ * world_;
    u.mine = dist::shard_of(padded, rank_, world_);
    u.flat = torch::zeros({padded}, u.members[0].options().requires_grad(false));
    for (size_t j = 0; j < u.members.size(); ++j) {
      auto& p = u.members[j];
      auto place = u.flat.narrow(0, u.offsets[j], p.numel());
      place.copy_(p.reshape(-1));
      p.set_data(place.view(p.sizes()));
    }
    if (world_ == 1) {
      u.shard = u.flat;
      u.gathered = true;  // for good: nothing to gather from
    } else {
      u.shard = u.flat.narrow(0, u.mine.begin, u.mine.size).clone();
      free_storage(u.flat);
    }
    if (!u.trainable) continue;
    u.exp_avg = torch::zeros_like(u.shard);
    u.exp_avg_sq = torch::zeros_like(u.shard);
    for (auto& p : u.members) {
      auto accumulator = torch::autograd::impl::grad_accumulator(p);
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, &u](const torch::autograd::variable_list& outputs,
                     const torch::autograd::variable_list&) {
            gradient_ready(u);
            return outputs;
          }));
      accumulators_.push_back(std::move(accumulator));
    }
  }
  // Autocast keeps the bf16 copy of every fp32 weight that requires gradients until the forward
  // ends: 2 bytes a parameter of every layer, whole on every process. Each layer casts its own
  // weights once a forward anyway, so the cache saves nothing here.
  if (std::any_of(units_.begin(), units_.end(), [](const auto& u) { return u->trainable; }))
    at::autocast::set_autocast_cache_enabled(false);
  model->before_stage = [this](int64_t stage) { before_stage(stage); };
  model->after_layer = [this](int64_t layer, const torch::Tensor& output) {
    if (!torch::GradMode::is_enabled() || !output.requires_grad()) return;
    output.register_hook([this, layer](const torch::Tensor&) { before_layer_backward(layer); });
  };
}

FullSharding::~FullSharding() {
  model_->before_stage = nullptr;
  model_->after_layer = nullptr;
}

FullSharding::Unit& FullSharding::layer_unit(int64_t layer) { return *units_.at(1 + layer); }

bool FullSharding::holds(const torch::Tensor& t) const {
  for (const auto& u : units_)
    for (const auto& p : u->members)
      if (p.is_same(t)) return true;
  return false;
}

// Stage -1: the embedding (the root); l: decoder layer l; layers: the final norm (the root).
void FullSharding::before_stage(int64_t stage) {
  const int64_t layers = static_cast<int64_t>(units_.size()) - 1;
  if (stage < 0) {
    wait_for(*units_[0]);
    if (layers > 0) start_gather(layer_unit(0));
    return;
  }
  if (stage > 0) free(layer_unit(stage - 1));  // first: at most two layers are gathered at once
  if (stage < layers) {
    wait_for(layer_unit(stage));
    if (stage + 1 < layers) start_gather(layer_unit(stage + 1));
  }
}

// Layer `layer`'s output has its gradient: its backward (with checkpointing, its recompute) is
// next, and the layer above has finished its own.
void FullSharding::before_layer_backward(int64_t layer) {
  const int64_t layers = static_cast<int64_t>(units_.size()) - 1;
  if (layer + 1 < layers) free(layer_unit(layer + 1));
  wait_for(layer_unit(layer));
  if (layer > 0) start_gather(layer_unit(layer - 1));
}

void FullSharding::start_gather(Unit& u) {
  if (u.gathered || u.numel == 0) return;
  torch::NoGradGuard no_grad;
  allocate_storage(u.flat);
  u.flat.narrow(0, u.mine.begin, u.mine.size).copy_(u.shard);
  u.wait_for_gather = comm_.start_all_gather_in_place(u.flat, "weights (all-gather)");
  u.gathered = true;
  // What the storage really holds now, not what the bookkeeping says: the test of freeing.
  int64_t gathered = 0;
  for (const auto& unit : units_)
    if (unit->numel > 0)
      gathered += static_cast<int64_t>(unit->flat.storage().nbytes()) / unit->flat.element_size();
  peak_gathered_ = std::max(peak_gathered_, gathered);
}

void FullSharding::wait_for(Unit& u) {
  start_gather(u);
  if (!u.wait_for_gather) return;
  u.wait_for_gather();
  u.wait_for_gather = nullptr;
}

void FullSharding::free(Unit& u) {
  if (world_ == 1 || !u.gathered) return;
  wait_for(u);  // a gather still writing into the storage must finish first
  free_storage(u.flat);
  u.gathered = false;
}

void FullSharding::gradient_ready(Unit& u) {
  if (++u.gradients_ready < u.members.size()) return;
  u.gradients_ready = 0;
  reduce_gradients(u);
}

// The unit's full-size gradients, flattened like its weights, summed over processes into this
// process's slice and added to the slice's gradient (accumulation); the full-size ones go.
void FullSharding::reduce_gradients(Unit& u) {
  torch::NoGradGuard no_grad;
  auto flat = torch::empty({u.flat.numel()}, u.shard.options());
  for (size_t j = 0; j < u.members.size(); ++j) {
    auto& p = u.members[j];
    auto place = flat.narrow(0, u.offsets[j], p.numel());
    if (p.grad().defined())
      place.copy_(p.grad().reshape(-1));
    else
      place.zero_();  // a tensor this backward did not reach (autograd still ran its accumulator)
    p.mutable_grad() = torch::Tensor();
  }
  if (u.numel < flat.numel()) flat.narrow(0, u.numel, flat.numel() - u.numel).zero_();
  torch::Tensor mine = flat;
  if (world_ > 1) {
    mine = torch::empty({u.mine.size}, flat.options());
    comm_.reduce_scatter_sum(flat, mine, "gradients (reduce-scatter)");
  }
  auto& grad = u.shard.mutable_grad();
  if (grad.defined())
    grad.add_(mine);
  else
    grad = mine;
}

void FullSharding::finish_backward() {
  for (auto& u : units_) {
    TORCH_CHECK(u->gradients_ready == 0, u->name, ": only ", u->gradients_ready, " of ",
                u->members.size(), " gradients arrived in this backward");
  }
  release();
}

void FullSharding::release() {
  for (auto& u : units_) free(*u);
}

void FullSharding::drop_gradients() {
  for (auto& u : units_) {
    if (!u->trainable) continue;
    u->shard.mutable_grad() = torch::Tensor();
    u->gradients_ready = 0;
    for (auto& p : u->members) p.mutable_grad() = torch::Tensor();
  }
}

std::vector<AdamWParam> FullSharding::optimizer_entries(
    const std::function<bool(const std::string&, const torch::Tensor&)>& decays) {
  std::vector<AdamWParam> entries;
  for (auto& unit : units_) {
    Unit& u = *unit;
    if (!u.trainable) continue;
    for (size_t j = 0; j < u.members.size(); ++j) {
      // The part of this tensor inside this process's slice, if any.
      const int64_t begin = std::max(u.offsets[j], u.mine.begin);
      const int64_t end = std::min(u.offsets[j] + u.members[j].numel(), u.mine.begin + u.mine.size);
      if (begin >= end) continue;
      const int64_t in_shard = begin - u.mine.begin;
      entries.push_back({u.names[j], u.shard, decays(u.names[j], u.members[j]),
                         u.exp_avg.narrow(0, in_shard, end - begin),
                         u.exp_avg_sq.narrow(0, in_shard, end - begin), in_shard, end - begin,
                         begin - u.offsets[j]});
    }
  }
  return entries;
}

void FullSharding::with_gathered(Unit& u, const std::function<void(const torch::Tensor&)>& read) {
  const bool was_gathered = u.gathered;
  wait_for(u);
  read(u.flat);
  if (!was_gathered) free(u);
}

// Host copies of each member's part of `flat` (a full-size tensor laid out like the unit's
// buffer), named after the member plus `suffix`.
void FullSharding::append_host_copies(const Unit& u, const torch::Tensor& flat,
                                      const std::string& suffix,
                                      std::vector<std::pair<std::string, torch::Tensor>>& out) {
  for (size_t j = 0; j < u.members.size(); ++j) {
    const auto& p = u.members[j];
    out.emplace_back(u.names[j] + suffix,
                     flat.narrow(0, u.offsets[j], p.numel())
                         .view(p.sizes())
                         .to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
  }
}

std::map<std::string, torch::Tensor> FullSharding::gather_weights(bool keep, bool trainable_only) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> copies;
  for (auto& u : units_) {
    if (u->numel == 0 || (trainable_only && !u->trainable)) continue;
    with_gathered(*u, [&](const torch::Tensor& flat) {
      if (keep) append_host_copies(*u, flat, "", copies);
    });
  }
  return {copies.begin(), copies.end()};
}

std::vector<std::pair<std::string, torch::Tensor>> FullSharding::gather_optimizer_state(bool keep) {
  torch::NoGradGuard no_grad;
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (auto& u : units_) {
    if (!u->trainable) continue;
    for (const auto& [suffix, shard] :
         {std::pair{".exp_avg", u->exp_avg}, std::pair{".exp_avg_sq", u->exp_avg_sq}}) {
      auto full = torch::empty({u->flat.numel()}, shard.options());
      full.narrow(0, u->mine.begin, u->mine.size).copy_(shard);
      comm_.all_gather_in_place(full, "optimizer state (checkpoint)");
      if (keep) append_host_copies(*u, full, suffix, out);
    }
  }
  return out;
}

torch::Tensor FullSharding::zero_loss(const torch::Tensor& pad_token) {
  auto ids = pad_token.reshape({1, 1});
  auto hidden = model_->hidden_states(ids, torch::zeros_like(ids));
  return model_->logits(hidden).sum() * 0.0;
}

std::string FullSharding::peak_report() const {
  int64_t all = 0, root = units_[0]->flat.defined() ? units_[0]->flat.numel() : 0, layer = 0;
  for (const auto& u : units_) {
    if (!u->flat.defined()) continue;
    all += u->flat.numel();
    if (u.get() != units_[0].get()) layer = std::max(layer, u->flat.numel());
  }
  std::ostringstream text;
  text << "at most " << (world_ == 1 ? all : peak_gathered_) << " of " << all
       << " sharded elements gathered at once (the root's " << root << " and two layers' "
       << 2 * layer << ")";
  return text.str();
}

std::string FullSharding::describe() const {
  int64_t units = 0, all = 0, mine = 0;
  for (const auto& u : units_) {
    if (u->numel == 0) continue;
    ++units;
    all += u->numel;
    mine += u->mine.size;
  }
  std::ostringstream text;
  text << units << " units, " << mine << " of " << all << " elements on this process";
  return text.str();
}

}  // namespace kubetune::train
