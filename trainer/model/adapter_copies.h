// The LoRA adapters' weights in the products' dtype, made for a whole forward by one batched copy.
//
// Adapters train in fp32 and multiply in bf16. Cast one weight at a time, that is a kernel and
// about 10 us of host time per weight: 252 a step on Qwen3-8B, in a forward whose pace is the
// host's (the GPU waits for launches between its short kernels). One foreach copy at the start of
// the forward makes them all.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace kubetune::model {

// One weight's copy, and what it was copied from.
class ComputeCopy {
 public:
  // The copy, while it is of the current forward (see forget_compute_copies) and the weight is
  // still what it was copied from (same storage, no in-place change since), in `dtype`; else the
  // weight cast here.
  torch::Tensor of(const torch::Tensor& weight, at::ScalarType dtype) const;

 private:
  friend void refresh_compute_copies(
      const std::vector<std::pair<ComputeCopy*, torch::Tensor>>& weights, at::ScalarType dtype);
  torch::Tensor values_;
  int64_t version_ = -1;
  const void* source_ = nullptr;
  uint64_t forward_ = 0;  // forget_compute_copies' count when made
};

// Called as a forward starts: no copy made before is used again. A weight can change where its
// version counter does not see it (ZeRO-2 gathers into the flat buffer it is a view of), so a
// copy is trusted only within the forward that made it, after the weights it read had arrived;
// a gradient checkpoint's recompute in that forward's backward still reads it.
void forget_compute_copies();

// Copies each weight into its ComputeCopy, all in one new buffer: never written in place, so a
// graph of an earlier forward keeps the copies it saved. Weights already in `dtype` need none.
void refresh_compute_copies(const std::vector<std::pair<ComputeCopy*, torch::Tensor>>& weights,
                            at::ScalarType dtype);

}  // namespace kubetune::model
