// How the processes' copies of the weights stay in step: which gradients are reduced and how,
// which part of the weights each process's AdamW updates, and when weights travel back. The
// training step (trainer/loop/step.cpp) calls this interface at fixed points and never asks which
// scheme it has, as in torchtitan, where the step does not know which parallelism was applied.
//
// Three schemes (distributed.sharding), each in a file of its own:
//   replicated_weights.cpp  none: DDP. Every process holds and updates everything; gradients are
//                           all-reduced in buckets during backward (and a trainable embedding's
//                           by the rows the step looked up, embedding_gradient_sync.h).
//   optimizer_sharding.cpp  optimizer: ZeRO-2. Gradient buckets are reduce-scattered; each process
//                           updates its slice and the slices are all-gathered back.
//   full_sharding.cpp       full: ZeRO-3 (FSDP). Weights, gradients and AdamW's state live in
//                           slices; each layer's weights are gathered for its forward and backward.
// The sharded ones keep their slices in FlatShard (flat_shard.h).
//
// The step's calls, in order:
//   begin_step(rows)            before the first forward
//   forward/backward per micro-batch, after_backward() after each; a micro-batch with no examples
//                               (or after running out of memory) backpropagates empty_batch_loss()
//   finish_gradients()          after the last backward: gradients are complete on every process
//   AdamW over optimizer_entries(), then after_update(), then drop_gradients()
// Anything that reads weights outside a forward (evaluation, checkpoint, output) calls
// wait_for_weights() first; outputs read sharded values through the gathers.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/train_config.h"
#include "trainer/model/causal_lm.h"
#include "trainer/model/named_params.h"
#include "trainer/optim/adamw.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/flat_shard.h"

namespace kubetune::parallel {

using RowIds = std::function<std::vector<int64_t>()>;
// A trainable tensor's whole value by name, as a checkpoint stores it (on the host).
using WeightReader = std::function<torch::Tensor(const std::string&)>;

class WeightSync {
 public:
  virtual ~WeightSync() = default;

  // What this process's AdamW updates: whole tensors, or its slices of them.
  virtual std::vector<optim::AdamWParam> optimizer_entries(const DecayRule& decays) = 0;
  // Whether those entries are split between processes: the gradient norm is then a sum over
  // them, each element counted by its owner (whole entries by rank 0).
  virtual bool splits_optimizer() const = 0;
  // "optimizer sharded across processes (…)" for the log's first line; empty when replicated.
  virtual std::string describe() const = 0;
  // A line for the end of the run (how much was gathered at most), or empty.
  virtual std::string end_report() const { return {}; }

  // `rows()`: the sorted token ids the step's global batch looks up (the same on every process),
  // computed only by a scheme that needs them.
  virtual void begin_step(const RowIds& rows) = 0;
  // A loss whose backward gives every trainable tensor a zero gradient and takes part in every
  // collective its peers' backward runs, for a micro-batch with nothing to learn from.
  virtual torch::Tensor empty_batch_loss(int32_t pad_id) = 0;
  virtual void after_backward() {}
  virtual void finish_gradients() {}
  // Empty when a process that ran out of memory half-way through a forward or backward can still
  // take part in the step with zero gradients; otherwise why it cannot.
  virtual std::string why_out_of_memory_is_final() const { return {}; }
  virtual void after_update() {}
  // Drops every gradient this scheme keeps besides the trainable tensors' own.
  virtual void drop_gradients() {}
  virtual void wait_for_weights() {}
  // After an evaluation's forward, which may leave weights gathered.
  virtual void after_evaluation() {}

  // For the outputs: a weight's whole value, on this process's device. A fully sharded one is
  // gathered with its layer, a collective: every process asks for the same names in the same
  // order, and the layer asked for before is freed. Call after_reading_weights() after the last.
  // (Checkpoints need no gather: each process writes the slices its optimizer updates.)
  virtual torch::Tensor weight_value(const std::string& /*name*/, const torch::Tensor& param) {
    return param;
  }
  virtual void after_reading_weights() {}

  // Whether `t` lives in slices across the processes rather than whole on each.
  virtual bool splits(const torch::Tensor& /*t*/) const { return false; }
  // Before the first step, on resume: sets the trainable weights held whole from a checkpoint (a
  // scheme that splits some restores its slices of those too).
  virtual void restore_weights(const model::NamedParams& trainable, const WeightReader& read);
  // The trainable tensors every process holds whole, which rank 0 broadcasts before the first
  // step (the split ones were loaded alike on every process: full_sharding.h).
  std::vector<torch::Tensor> held_whole(const model::NamedParams& trainable) const;
};

// AdamW's entries for tensors each process updates whole: those of `tensors` that `skip` (when
// given) does not claim, in their order. The part every scheme has beside its own slices.
std::vector<optim::AdamWParam> whole_entries(
    const model::NamedParams& tensors, const DecayRule& decays,
    const std::function<bool(const torch::Tensor&)>& skip = {});

class FullSharding;

// The model's parts as they load, for the scheme that will keep them: under sharding full each is
// split at once (full_sharding.h), so that no process ever holds the whole model; under the
// others nothing happens. make_weight_sync then takes what it split.
class WeightLoading {
 public:
  // `autocast`: the dtype autocast computes products in (train::autocast_dtype), if any.
  WeightLoading(const TrainConfig& config, Communicator& comm,
                std::optional<torch::ScalarType> autocast);
  ~WeightLoading();
  WeightLoading(const WeightLoading&) = delete;
  WeightLoading& operator=(const WeightLoading&) = delete;
  // train::load_model's after_part.
  void part_loaded(const std::string& prefix, torch::nn::Module& part);

 private:
  friend std::unique_ptr<WeightSync> make_weight_sync(const TrainConfig&, Communicator&,
                                                      model::CausalLM&, const model::NamedParams&,
                                                      WeightLoading&);
  std::unique_ptr<FullSharding> full_;  // null unless distributed.sharding full
};

// The scheme of distributed.sharding, once the model has loaded through `loading`.
std::unique_ptr<WeightSync> make_weight_sync(const TrainConfig& config, Communicator& comm,
                                             model::CausalLM& model,
                                             const model::NamedParams& trainable,
                                             WeightLoading& loading);

}  // namespace kubetune::parallel
