// Tensors laid out one after another in one flat buffer, of which each of N processes owns an
// equal slice: the one data structure under both sharding schemes (optimizer_sharding.h, ZeRO-2,
// whose flats are gradient buckets; full_sharding.h, ZeRO-3, whose flats are model layers).
//
// Why one buffer: a collective over one flat tensor is one launch, and slice r of the weights,
// of their gradients and of AdamW's moments are then the same elements, so reduce-scatter and
// all-gather write straight into place.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trainer/optim/adamw.h"
#include "trainer/parallel/communicator.h"
#include "trainer/parallel/gradient_buckets.h"

namespace kubetune::parallel {

// Tensors by name, in a fixed order (checkpoints and outputs keep the per-tensor format).
// Whether AdamW's weight decay applies to a tensor (optim::decays_weight).
using DecayRule = std::function<bool(const std::string&, const torch::Tensor&)>;

struct FlatShard {
  std::vector<torch::Tensor> members;  // views into `flat` once moved
  std::vector<std::string> names;
  std::vector<int64_t> offsets;  // of each member in `flat`
  int64_t numel = 0;             // of the members; `flat` may be padded beyond it
  Slice mine{0, 0};              // this process's slice of `flat`
  torch::Tensor flat;
  torch::Tensor exp_avg, exp_avg_sq;  // AdamW's moments of `mine`, when this process updates it

  // `align`: the member starts at a multiple of that many elements.
  void add(const std::string& name, const torch::Tensor& tensor, int64_t align = 1);

  // Allocates `flat` with `padded` elements (padding zeroed), copies the members into it, makes
  // them views of it (same values; every holder of the tensors sees the move) and takes this
  // process's slice.
  void move_into_flat(int64_t padded, int rank, int world);
  // A multiple of `world` at least numel.
  int64_t padded_to(int world) const { return (numel + world - 1) / world * world; }

  // AdamW's moments of `mine`, in the dtype of the copy AdamW updates (the master's, when the
  // members are gathered in another: full_sharding.h).
  void allocate_moments(torch::ScalarType dtype);
  // After move_into_flat: `flat` becomes a new, uninitialised buffer of `dtype` and the members
  // views of it, e.g. fp32 weights gathered in bf16 from their fp32 slices (full_sharding.h).
  void retype(torch::ScalarType dtype);

  // The part of member j inside this process's slice, as [begin, end) of `flat`; empty when the
  // slice does not touch it.
  std::optional<std::pair<int64_t, int64_t>> overlap(size_t j) const;

  // AdamW's entries for this process's slice: one per member the slice touches. `master`
  // undefined: the member itself is updated (its gradient lives in the member, as DDP's buckets
  // leave it). Defined: `master` is this process's own copy of `mine` (with its own gradient),
  // and the entry names the member it holds part of.
  std::vector<optim::AdamWParam> optimizer_entries(const DecayRule& decays,
                                                   const torch::Tensor& master = {}) const;
};

}  // namespace kubetune::parallel
