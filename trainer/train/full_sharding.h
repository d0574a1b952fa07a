// ZeRO stage 3 (Rajbhandari et al. 2020), as torch's FSDP does it: the weights, their gradients
// and AdamW's state all live in 1/N slices across the N data-parallel processes
// (distributed.sharding full).
//
// Why: with the optimizer alone sharded (weight_shards.h) every process still holds every weight
// and gradient, 8 bytes a parameter in fp32 before AdamW's 8: Llama-3.1-8B's full fine-tuning
// needs 64 GB for those alone, and a 70B base for LoRA 140 GB. Sharded, that is divided by N.
//
// How: the model is cut into units, one per decoder layer and the "root" (embedding, final norm,
// untied output layer). A unit's tensors live in one flat buffer, padded to a multiple of N, of
// which this process keeps its slice (`shard`, the master copy AdamW updates). The buffer's
// storage exists only while the unit is gathered:
//   forward:  before layer l runs, its buffer is all-gathered (layer l+1's gather is started
//             then too, so it arrives while l computes) and layer l-1's storage is freed;
//   backward: a hook on layer l's output gathers layer l again before its backward (and starts
//             l-1's), and layer l+1's storage is freed, its backward being done;
//   gradients: once every trainable tensor of a unit has its gradient for this backward, they
//             are reduce-scattered into this process's slice (summed over micro-batches) and
//             the full-size gradients dropped.
// The root stays gathered from the embedding until the backward ends: the output layer reads it
// after the decoder and, tied, so does the loss.
// Freeing is the storage's, not the tensors': autograd's saved references to the weights stay
// valid and see the same values again once gathered (FSDP's resize-storage-to-0).
//
// With method lora only the frozen base is split; the adapters are whole on every process and
// all-reduced as without sharding. With one process nothing is freed or gathered: the shard is
// the buffer, and the path differs from no sharding only by the gradient's copy into it.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainer/dist/communicator.h"
#include "trainer/dist/gradient_buckets.h"
#include "trainer/model/causal_lm.h"
#include "trainer/train/adamw.h"

namespace torch::autograd {
struct Node;
}

namespace kubetune::train {

class FullSharding {
 public:
  // Splits `model`'s parameters into units. `split(tensor)` says which of them are sharded
  // (method full: all; lora: the frozen ones). Sets the model's before_stage and after_layer.
  FullSharding(model::CausalLM& model, dist::Communicator& comm,
               const std::function<bool(const torch::Tensor&)>& split);
  ~FullSharding();
  FullSharding(const FullSharding&) = delete;
  FullSharding& operator=(const FullSharding&) = delete;

  // Whether `t` is one of the sharded tensors (its values are then not readable in between).
  bool holds(const torch::Tensor& t) const;
  // AdamW's entries for this process's slices of the trainable sharded tensors: one per tensor
  // the slice touches, named after it (checkpoints keep their per-tensor format).
  std::vector<AdamWParam> optimizer_entries(
      const std::function<bool(const std::string&, const torch::Tensor&)>& decays);

  // After each backward: checks that every unit's gradients were reduced and frees what is still
  // gathered. release() frees too (after an evaluation, whose forward leaves the root gathered).
  void finish_backward();
  void release();
  // Drops the slices' gradients (after the update, or after running out of memory).
  void drop_gradients();

  // Full-size host copies of the sharded tensors (trainable ones only, or all), by name. A
  // collective: every process calls it; only `keep` gets the copies.
  std::map<std::string, torch::Tensor> gather_weights(bool keep, bool trainable_only);
  // The same for AdamW's "<name>.exp_avg" / ".exp_avg_sq".
  std::vector<std::pair<std::string, torch::Tensor>> gather_optimizer_state(bool keep);

  // A forward and backward on one padding token with zero gradients: a process with no examples
  // in a micro-batch still takes part in every gather and reduction of its peers' step.
  torch::Tensor zero_loss(const torch::Tensor& pad_token);

  // "13 units (1/N each: 1.23M of 3.70M elements)" for the start of the log.
  std::string describe() const;
  // "at most 120 of 400 sharded elements gathered at once (...)": the storage actually held, at
  // its peak so far (one process: all of it, always).
  std::string peak_report() const;

 private:
  struct Unit;
  Unit& layer_unit(int64_t layer);
  void before_stage(int64_t stage);
  void before_layer_backward(int64_t layer);
  void start_gather(Unit& u);
  void wait_for(Unit& u);
  void free(Unit& u);
  void gradient_ready(Unit& u);
  void reduce_gradients(Unit& u);
  static void append_host_copies(const Unit& u, const torch::Tensor& flat,
                                 const std::string& suffix,
                                 std::vector<std::pair<std::string, torch::Tensor>>& out);
  // Gathers `u` if it is not, calls `read` with its full flat buffer, and frees it again.
  void with_gathered(Unit& u, const std::function<void(const torch::Tensor&)>& read);

  dist::Communicator& comm_;
  model::CausalLM model_;
  int rank_, world_;
  std::vector<std::unique_ptr<Unit>> units_;  // [0]: the root; [1 + l]: decoder layer l
  // Autograd holds its gradient accumulators weakly; the hooks on them live as long as these.
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  int64_t peak_gathered_ = 0;  // elements of all units' storage, at most, after any gather
};

}  // namespace kubetune::train
