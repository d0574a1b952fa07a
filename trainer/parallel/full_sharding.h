// distributed.sharding full: ZeRO stage 3 (Rajbhandari et al. 2020), as torch's FSDP does it: the
// weights, their gradients and AdamW's state all live in 1/N slices across the N data-parallel
// processes. See weight_sync.h for the interface.
//
// Why: with the optimizer alone sharded (optimizer_sharding.h) every process still holds every
// weight and gradient, 8 bytes a parameter in fp32 before AdamW's 8: Llama-3.1-8B's full
// fine-tuning needs 64 GB for those alone, and a 70B base for LoRA 140 GB. Sharded, that is divided
// by N.
//
// How: the model is cut into units, one per decoder layer and the "root" (embedding, final norm,
// untied output layer). A unit's tensors live in one flat buffer (a FlatShard, flat_shard.h),
// padded to a multiple of N, of which this process keeps its slice (`shard`, the master copy AdamW
// updates). The buffer's storage exists only while the unit is gathered:
//   forward:  before layer l runs, its buffer is all-gathered (layer l+1's gather is started
//             then too, so it arrives while l computes) and layer l-1's storage is freed;
//   backward: a hook on layer l's output gathers layer l again before its backward (and starts
//             l-1's), and layer l+1's storage is freed, its backward being done;
//   gradients: once every trainable tensor of a unit has its gradient for this backward, they
//             are reduce-scattered into this process's slice (summed over micro-batches) and
//             the full-size gradients dropped.
// Loading: a decoder layer is split as soon as it is loaded (take_part), so a process holds at most
// its slices, the root and the one layer being loaded, never the whole model. Every process reads
// the same files (or draws the same random weights from the same seed), so nothing is broadcast.
// The root stays gathered from the embedding until the backward ends: the output layer reads it
// after the decoder and, tied, so does the loss.
// Freeing is the storage's, not the tensors': autograd's saved references to the weights stay
// valid and see the same values again once gathered (FSDP's resize-storage-to-0).
//
// Full fine-tuning on GPUs: the forward rounds a layer's matrices to bf16 before every product
// (autocast). Their gathers round first, from the fp32 slices: the same values, half the bytes,
// as FSDP's param_dtype. Their gradients arrive in bf16, as autocast's products gave them before,
// and are reduced in fp32. Norms and biases, some applied in fp32, are gathered in fp32; so is
// the root, whose embedding's dtype is the residual stream's.
//
// With method lora only the frozen base is split; the adapters are whole on every process and
// all-reduced as without sharding. With one process nothing is freed or gathered: the shard is
// the buffer, and the path differs from no sharding only by the gradient's copy into it.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/parallel/bucketed_gradients.h"
#include "trainer/parallel/weight_sync.h"

namespace torch::autograd {
struct Node;
}

namespace kubetune::parallel {

class FullSharding : public WeightSync {
 public:
  // Made before the model loads, so that no process ever holds the whole model: each part is
  // split as it arrives (take_part), and attach() finishes the job once the model is complete.
  // `trains_units`: every split tensor trains (method full), or none does (lora, qlora: the
  // frozen base; their adapters, made after loading, stay whole). `products_dtype`: the dtype
  // the decoder layers' matrices (model::product_operands) are gathered in, if not their own
  // (train::gathered_products_dtype).
  FullSharding(Communicator& comm, bool trains_units,
               std::optional<torch::ScalarType> products_dtype);
  ~FullSharding() override;
  FullSharding(const FullSharding&) = delete;
  FullSharding& operator=(const FullSharding&) = delete;

  // A part of the model (CausalLMImpl::parts: its parameters' names start with `prefix`), just
  // loaded (and for QLoRA quantized): its parameters and 4-bit base join their unit. A decoder
  // layer is a unit of its own and is split at once, its storage freed; the root's parts
  // (embedding, final norm, output layer) wait for attach().
  void take_part(const std::string& prefix, torch::nn::Module& part);
  // After loading, with LoRA's adapters in place: splits the root, hooks the gradients and the
  // layers' forward and backward. The trainable tensors not split (the adapters) are all-reduced
  // in buckets of `bucket_mb`.
  void attach(model::CausalLM& model, const model::NamedParams& trainable, double bucket_mb);

  // This process's slices of the trainable sharded tensors (one entry per tensor the slice
  // touches, named after it: checkpoints keep their per-tensor format), the rest whole.
  std::vector<optim::AdamWParam> optimizer_entries(const DecayRule& decays) override;
  bool splits_optimizer() const override { return true; }
  // "fully sharded across processes (13 units, 1.23M of 3.70M elements on this process)".
  std::string describe() const override;
  // "at most 120 of 400 sharded elements gathered at once (...)": the storage actually held, at
  // its peak so far (one process: all of it, always).
  std::string end_report() const override;

  void begin_step(const RowIds&) override {}
  // With peers, a forward and backward on one padding token with zero gradients: a process with
  // no examples in a micro-batch still takes part in every gather and reduction of its peers.
  torch::Tensor empty_batch_loss(int32_t pad_id) override;
  // Checks that every unit's gradients were reduced and frees what is still gathered.
  void after_backward() override;
  std::string why_out_of_memory_is_final() const override;
  // Drops the slices' gradients (after the update, or after running out of memory).
  void drop_gradients() override;
  // An evaluation's forward leaves the root gathered.
  void after_evaluation() override { release(); }

  torch::Tensor weight_value(const std::string& name, const torch::Tensor& param) override;
  void after_reading_weights() override { release(); }

  bool splits(const torch::Tensor& t) const override { return holds(t); }
  // A split tensor's values are restored into this process's slice of them.
  void restore_weights(const model::NamedParams& trainable, const WeightReader& read) override;

  // Whether `t` is one of the sharded tensors (its values are then not readable in between).
  bool holds(const torch::Tensor& t) const;

 private:
  struct Piece;
  struct Unit;
  Unit& layer_unit(int64_t layer);
  Unit& unit_named(const std::string& name);
  void split(Unit& u);
  void hook_gradients(Unit& u);
  void before_stage(int64_t stage);
  void before_layer_backward(int64_t layer);
  void start_gather(Unit& u);
  void wait_for(Unit& u);
  void free(Unit& u);
  void release();
  void gradient_ready(Unit& u);
  void reduce_gradients(Piece& p);
  torch::Tensor master_value(Unit& u, size_t member);

  Communicator& comm_;
  bool trains_units_;
  std::optional<torch::ScalarType> products_dtype_;
  model::CausalLM model_{nullptr};
  model::NamedParams trainable_;
  int rank_, world_;
  std::vector<std::unique_ptr<Unit>> units_;  // [0]: the root; [1 + l]: decoder layer l
  std::unique_ptr<BucketedGradients> whole_;  // trainable tensors not split (LoRA's adapters)
  // Autograd holds its gradient accumulators weakly; the hooks on them live as long as these.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  Unit* being_read_ = nullptr;  // the unit weight_value gathered last
  torch::Tensor master_read_;   // and its products' fp32 values, for an output's exact weights
  int64_t peak_gathered_ = 0;   // elements of all units' storage, at most, after any gather
};

}  // namespace kubetune::parallel
