#include "trainer/parallel/full_sharding.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <sstream>

namespace kubetune::parallel {

// One flat buffer of a unit's tensors, padded to a multiple of the world; its storage exists only
// while gathered (one process: always).
struct FullSharding::Piece {
  FlatShard flat;
  torch::Tensor shard;  // this process's slice; of trainable tensors, the master copy AdamW updates
  bool empty() const { return flat.numel == 0; }
};

struct FullSharding::Unit {
  std::string name;  // "model.layers.3", or "root"
  Piece weights;     // in their own dtype: fp32 when trained, the base's when frozen
  Piece products;    // with products_dtype_: the layer's matrices, gathered in it (shard: fp32)
  // QLoRA's 4-bit base (CausalLMImpl::quantized_tensors), one piece per dtype (the blocks'
  // bytes, the scales), split, gathered and freed with the weights.
  std::vector<Piece> quantized;
  bool trainable = false;  // every member trains (full), or none does (lora's base)
  bool gathered = false;
  std::function<void()> wait_for_gather;  // set while the gather is in flight
  size_t gradients_ready = 0;             // members whose gradient arrived in this backward

  // The weights and products pieces that hold tensors: the parameters' pieces.
  std::vector<Piece*> parameters() {
    std::vector<Piece*> all;
    for (Piece* p : {&weights, &products})
      if (!p->empty()) all.push_back(p);
    return all;
  }
  std::vector<Piece*> pieces() {
    auto all = parameters();
    for (Piece& q : quantized) all.push_back(&q);
    return all;
  }
  // The pieces whose members have gradients, and the members' number.
  std::vector<Piece*> trained() { return trainable ? parameters() : std::vector<Piece*>{}; }
  size_t trained_members() {
    size_t n = 0;
    for (const Piece* p : trained()) n += p->flat.members.size();
    return n;
  }
  // The elements of the parameters' buffers, padding included.
  int64_t padded_elements() {
    int64_t n = 0;
    for (const Piece* p : parameters()) n += p->flat.flat.numel();
    return n;
  }
  // The piece that holds `t`, if any.
  Piece* holding(const torch::Tensor& t) {
    for (Piece* p : {&weights, &products})
      for (const auto& m : p->flat.members)
        if (m.is_same(t)) return p;
    return nullptr;
  }
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

// The unit of a parameter name: 1 + l for decoder layer l, 0 (the root) for the rest.
size_t unit_of(const std::string& name) {
  const auto layer = model::decoder_layer_of(name);
  return layer ? 1 + static_cast<size_t>(*layer) : 0;
}

}  // namespace

FullSharding::FullSharding(Communicator& comm, bool trains_units,
                           std::optional<torch::ScalarType> products_dtype)
    : comm_(comm),
      trains_units_(trains_units),
      products_dtype_(products_dtype),
      rank_(comm.rank()),
      world_(comm.world_size()) {
  units_.push_back(std::make_unique<Unit>());
  units_.back()->name = "root";
}

FullSharding::Unit& FullSharding::unit_named(const std::string& name) {
  const size_t index = unit_of(name);
  while (units_.size() <= index) {
    units_.push_back(std::make_unique<Unit>());
    units_.back()->name = "model.layers." + std::to_string(units_.size() - 2);
  }
  return *units_[index];
}

void FullSharding::take_part(const std::string& prefix, torch::nn::Module& part) {
  torch::NoGradGuard no_grad;
  Unit* unit = nullptr;
  const auto products =
      products_dtype_ ? model::product_operands(part) : std::vector<torch::Tensor>{};
  for (const auto& item : part.named_parameters()) {
    const std::string name = prefix + "." + item.key();
    Unit& u = unit_named(name);
    const torch::Tensor& t = item.value();
    // The root stays in fp32: its embedding's output dtype sets the residual stream's.
    const bool product = products_dtype_ && &u != units_[0].get() &&
                         t.scalar_type() != *products_dtype_ &&
                         std::any_of(products.begin(), products.end(),
                                     [&](const torch::Tensor& m) { return m.is_same(t); });
    Piece& piece = product ? u.products : u.weights;
    const auto& first = piece.flat.members;
    TORCH_CHECK(first.empty() || t.options().type_equal(first[0].options()), u.name,
                " mixes dtypes or devices (", name, ")");
    u.trainable = trains_units_;
    // The products' bf16 views go to cuBLAS and grouped GEMMs: each starts 16-byte aligned.
    piece.flat.add(name, t, /*align=*/product ? 8 : 1);
    unit = &u;
  }
  for (const auto& [suffix, t] : model::quantized_tensors(part)) {
    const std::string name = prefix + "." + suffix;
    Unit& u = unit_named(name);
    TORCH_CHECK(!trains_units_, u.name, " mixes a 4-bit base with trainable tensors (", name, ")");
    // The unit's flat buffer for tensors of t's dtype, added if there is none yet.
    auto part_of = std::find_if(u.quantized.begin(), u.quantized.end(), [&](const auto& q) {
      return q.flat.members.front().options().type_equal(t.options());
    });
    Piece& q = part_of != u.quantized.end() ? *part_of : u.quantized.emplace_back();
    // Kernels may read the blocks with wide loads: each starts at a multiple of 16 elements.
    q.flat.add(name, t, /*align=*/16);
    unit = &u;
  }
  // A decoder layer is one part and one unit: complete, so split now.
  if (unit != nullptr && unit != units_[0].get()) split(*unit);
}

// The unit's tensors moved into their flat buffers, this process's slices kept, the rest freed
// (one process: each buffer is its slice, and stays). The products' slices keep the members'
// dtype, their buffer becomes products_dtype_'s.
void FullSharding::split(Unit& u) {
  for (Piece* p : u.pieces()) {
    FlatShard& f = p->flat;
    f.move_into_flat(f.padded_to(world_), rank_, world_);
    if (world_ == 1) {
      p->shard = f.flat;
      continue;
    }
    p->shard = f.flat.narrow(0, f.mine.begin, f.mine.size).clone();
    if (p == &u.products) f.retype(*products_dtype_);
    free_storage(f.flat);
  }
  u.gathered = world_ == 1;  // one process: for good, nothing to gather from
}

void FullSharding::attach(model::CausalLM& model, const model::NamedParams& trainable,
                          double bucket_mb) {
  torch::NoGradGuard no_grad;
  model_ = model;
  trainable_ = trainable;
  TORCH_CHECK(static_cast<int64_t>(units_.size()) == model->config().num_hidden_layers + 1,
              "distributed.sharding full: ", units_.size() - 1, " of ",
              model->config().num_hidden_layers, " decoder layers were split as they loaded");
  split(*units_[0]);
  for (auto& unit : units_) {
    Unit& u = *unit;
    for (const Piece* piece : u.parameters())
      for (const auto& p : piece->flat.members)
        TORCH_CHECK(p.requires_grad() == u.trainable, u.name, " has ",
                    p.requires_grad() ? "a trainable" : "a frozen",
                    " tensor among tensors that are not (distributed.sharding full splits units "
                    "that are all one or the other)");
    for (Piece* p : u.trained()) p->flat.allocate_moments(p->shard.scalar_type());
    hook_gradients(u);
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
  // What stays whole (LoRA's adapters) is all-reduced as without sharding; the embedding's
  // gradient, when it trains, is reduce-scattered with the rest of its unit.
  whole_ = std::make_unique<BucketedGradients>(comm_, model, trainable, bucket_mb,
                                               /*embedding_by_rows=*/false,
                                               [this](const torch::Tensor& t) { return holds(t); });
  whole_->attach(Communicator::Reduction::kAllReduce);
}

// Each member's gradient accumulator tells when its gradient for this backward arrived.
void FullSharding::hook_gradients(Unit& u) {
  for (Piece* piece : u.trained()) {
    for (auto& p : piece->flat.members) {
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
}

FullSharding::~FullSharding() {
  if (model_.is_empty()) return;  // never attached
  model_->before_stage = nullptr;
  model_->after_layer = nullptr;
}

FullSharding::Unit& FullSharding::layer_unit(int64_t layer) { return *units_.at(1 + layer); }

bool FullSharding::holds(const torch::Tensor& t) const {
  return std::any_of(units_.begin(), units_.end(),
                     [&](const auto& u) { return u->holding(t) != nullptr; });
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
  const auto pieces = u.pieces();
  if (u.gathered || pieces.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<std::function<void()>> waits;
  for (Piece* p : pieces) {
    FlatShard& f = p->flat;
    allocate_storage(f.flat);
    f.flat.narrow(0, f.mine.begin, f.mine.size).copy_(p->shard);  // the products: rounded here
    waits.push_back(comm_.start_all_gather_in_place(f.flat, "weights (all-gather)"));
  }
  u.wait_for_gather = [waits] {
    for (const auto& wait : waits) wait();
  };
  u.gathered = true;
  // What the storage really holds now, not what the bookkeeping says: the test of freeing.
  int64_t gathered = 0;
  for (const auto& unit : units_)
    for (const Piece* p : unit->parameters())
      gathered +=
          static_cast<int64_t>(p->flat.flat.storage().nbytes()) / p->flat.flat.element_size();
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
  for (Piece* p : u.pieces()) free_storage(p->flat.flat);
  u.gathered = false;
}

void FullSharding::gradient_ready(Unit& u) {
  if (++u.gradients_ready < u.trained_members()) return;
  u.gradients_ready = 0;
  for (Piece* p : u.trained()) reduce_gradients(*p);
}

// The piece's full-size gradients, flattened like its weights in the slice's dtype (fp32), summed
// over processes into this process's slice and added to the slice's gradient (accumulation); the
// full-size ones go.
void FullSharding::reduce_gradients(Piece& piece) {
  torch::NoGradGuard no_grad;
  const FlatShard& f = piece.flat;
  auto flat = torch::empty({f.flat.numel()}, piece.shard.options());
  // Zeros where no member is: the alignment gaps and the padding.
  auto zero = [&flat](int64_t begin, int64_t end) {
    if (begin < end) flat.narrow(0, begin, end - begin).zero_();
  };
  int64_t filled = 0;
  for (size_t j = 0; j < f.members.size(); ++j) {
    auto p = f.members[j];
    zero(filled, f.offsets[j]);
    auto place = flat.narrow(0, f.offsets[j], p.numel());
    if (p.grad().defined())
      place.copy_(p.grad().reshape(-1));
    else
      place.zero_();  // a tensor this backward did not reach (autograd still ran its accumulator)
    p.mutable_grad() = torch::Tensor();
    filled = f.offsets[j] + p.numel();
  }
  zero(filled, flat.numel());
  torch::Tensor mine = flat;
  if (world_ > 1) {
    mine = torch::empty({f.mine.size}, flat.options());
    comm_.reduce_scatter_sum(flat, mine, "gradients (reduce-scatter)");
  }
  auto& grad = piece.shard.mutable_grad();
  if (grad.defined())
    grad.add_(mine);
  else
    grad = mine;
}

void FullSharding::after_backward() {
  for (auto& u : units_) {
    TORCH_CHECK(u->gradients_ready == 0, u->name, ": only ", u->gradients_ready, " of ",
                u->trained_members(), " gradients arrived in this backward");
  }
  release();
}

void FullSharding::release() {
  for (auto& u : units_) free(*u);
  being_read_ = nullptr;
  master_read_ = torch::Tensor();
}

void FullSharding::drop_gradients() {
  for (auto& u : units_) {
    u->gradients_ready = 0;
    for (Piece* piece : u->trained()) {
      piece->shard.mutable_grad() = torch::Tensor();
      for (auto p : piece->flat.members) p.mutable_grad() = torch::Tensor();
    }
  }
}

std::string FullSharding::why_out_of_memory_is_final() const {
  if (world_ == 1) return {};
  return "distributed.sharding full, whose every forward and backward gathers weights from the "
         "other processes";
}

std::vector<optim::AdamWParam> FullSharding::optimizer_entries(const DecayRule& decays) {
  std::vector<optim::AdamWParam> entries;
  for (auto& u : units_) {
    for (const Piece* p : u->trained()) {
      auto slices = p->flat.optimizer_entries(decays, p->shard);
      entries.insert(entries.end(), slices.begin(), slices.end());
    }
  }
  auto whole =
      whole_entries(trainable_, decays, [this](const torch::Tensor& t) { return holds(t); });
  entries.insert(entries.end(), whole.begin(), whole.end());
  return entries;
}

torch::Tensor FullSharding::weight_value(const std::string& name, const torch::Tensor& param) {
  Unit& u = *units_.at(unit_of(name));
  const Piece* piece = u.holding(param);
  if (piece == nullptr) return param;  // held whole
  if (being_read_ != &u) {
    if (being_read_ != nullptr) free(*being_read_);
    master_read_ = torch::Tensor();
    being_read_ = &u;
  }
  if (piece == &u.products) {
    const auto& members = piece->flat.members;
    const auto j =
        static_cast<size_t>(std::find_if(members.begin(), members.end(),
                                         [&](const torch::Tensor& p) { return p.is_same(param); }) -
                            members.begin());
    return master_value(u, j);
  }
  wait_for(u);
  return param;  // a view into the unit's gathered storage
}

// Member j of the unit's products with its master's values, not the rounded ones its gathers
// give the forward: all the products' slices are gathered in their own dtype once per unit read.
torch::Tensor FullSharding::master_value(Unit& u, size_t j) {
  torch::NoGradGuard no_grad;
  const FlatShard& f = u.products.flat;
  if (!master_read_.defined()) {
    master_read_ = torch::empty({f.flat.numel()}, u.products.shard.options());
    master_read_.narrow(0, f.mine.begin, f.mine.size).copy_(u.products.shard);
    comm_.start_all_gather_in_place(master_read_, "weights (all-gather)")();
  }
  return master_read_.narrow(0, f.offsets[j], f.members[j].numel()).view(f.members[j].sizes());
}

void FullSharding::restore_weights(const model::NamedParams& trainable, const WeightReader& read) {
  torch::NoGradGuard no_grad;
  for (auto& u : units_) {
    for (Piece* p : u->trained()) {
      const FlatShard& f = p->flat;
      for (size_t j = 0; j < f.members.size(); ++j) {
        const auto part = f.overlap(j);
        if (!part) continue;
        const auto [begin, end] = *part;
        const auto values =
            read(f.names[j]).reshape(-1).narrow(0, begin - f.offsets[j], end - begin);
        p->shard.narrow(0, begin - f.mine.begin, end - begin).copy_(values);
      }
    }
  }
  WeightSync::restore_weights(trainable, read);  // the tensors held whole: LoRA's adapters
}

torch::Tensor FullSharding::empty_batch_loss(int32_t pad_id) {
  if (world_ == 1) return zero_loss(trainable_);
  const auto device = model_->model->embed_tokens->weight.device();
  auto ids = torch::full({1, 1}, static_cast<int64_t>(pad_id),
                         torch::TensorOptions().dtype(torch::kInt64).device(device));
  auto hidden = model_->hidden_states(ids, torch::zeros_like(ids));
  return model_->logits(hidden).sum() * 0.0;
}

std::string FullSharding::end_report() const {
  const int64_t root = units_[0]->padded_elements();
  int64_t all = 0, layer = 0;
  for (const auto& u : units_) {
    all += u->padded_elements();
    if (u.get() != units_[0].get()) layer = std::max(layer, u->padded_elements());
  }
  std::ostringstream text;
  text << "fully sharded weights: at most " << (world_ == 1 ? all : peak_gathered_) << " of " << all
       << " sharded elements gathered at once (the root's " << root << " and two layers' "
       << 2 * layer << ")";
  return text.str();
}

std::string FullSharding::describe() const {
  int64_t units = 0, all = 0, mine = 0, products = 0, quantized_all = 0, quantized_mine = 0;
  std::string products_dtype;  // what their gathered buffers really are
  for (const auto& u : units_) {
    for (const auto& q : u->quantized) {
      quantized_all += q.flat.numel * q.flat.flat.element_size();
      quantized_mine += q.flat.mine.size * q.flat.flat.element_size();
    }
    if (u->parameters().empty()) continue;
    ++units;
    for (const Piece* p : u->parameters()) {
      all += p->flat.numel;
      mine += p->flat.mine.size;
    }
    products += u->products.flat.numel;
    if (!u->products.empty()) products_dtype = c10::toString(u->products.flat.flat.scalar_type());
  }
  std::ostringstream text;
  text << "weights fully sharded across processes (" << units << " units, " << mine << " of " << all
       << " elements on this process";
  if (products > 0)
    text << "; " << products << " of them, the layers' matrices, gathered in " << products_dtype;
  if (quantized_all > 0)
    text << "; of the 4-bit base, " << quantized_mine << " of " << quantized_all << " bytes";
  text << ")";
  return text.str();
}

}  // namespace kubetune::parallel
