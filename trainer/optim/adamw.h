// AdamW with the arithmetic of torch.optim.AdamW: on GPUs its fused kernel (fused=True), elsewhere
// the single-tensor path written out. The state is plain named tensors that checkpoints save and
// load without LibTorch's archive format.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace kubetune::optim {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// One tensor to update, or with a sharded optimizer (trainer/parallel/weight_sync.h) one slice of
// it.
struct AdamWParam {
  std::string name;
  torch::Tensor param;  // the whole parameter; its gradient is param.grad()
  bool decay = true;    // biases and norm weights are not decayed, as in the HF Trainer
  torch::Tensor exp_avg, exp_avg_sq;  // allocated by AdamW unless given (then as values())
  int64_t offset = 0, numel = -1;     // the slice of the flattened `param`; -1: all of it
  // Where the slice starts among the elements of the tensor called `name`, when `param` is not
  // that tensor but a flat shard holding part of it (trainer/parallel/full_sharding.h); -1: at
  // `offset`.
  int64_t named_offset = -1;

  bool whole() const { return numel < 0; }
  // This entry's elements of `t` (`param` or its gradient).
  // One as_strided rather than view and narrow: this runs for every entry in every step, where
  // the host's dispatch is the cost (four calls an entry were 1.9 ms a step for a sharded LoRA).
  torch::Tensor values(const torch::Tensor& t) const {
    if (whole()) return t;
    TORCH_CHECK(t.is_contiguous(), name, ": a slice of a tensor that is not contiguous");
    return t.as_strided({numel}, {1}, t.storage_offset() + offset);
  }
  // This entry's elements of a full-size tensor of the named parameter (its optimizer state in
  // a checkpoint).
  torch::Tensor named_values(const torch::Tensor& t) const {
    return whole() ? t : t.view(-1).narrow(0, named_offset < 0 ? offset : named_offset, numel);
  }
};

// Biases and norm weights are not decayed (the HF Trainer's rule).
inline bool decays_weight(const std::string& name, const torch::Tensor& p) {
  return p.dim() >= 2 && name.find("norm") == std::string::npos;
}

class AdamW {
 public:
  AdamW(std::vector<AdamWParam> params, AdamWOptions options);
  // `skip`: a float scalar on the parameters' device; where it is 1 nothing changes (read on the
  // device by the fused kernel, as GradScaler's found_inf, so the host need not wait for it). The
  // step is counted either way: a caller that skipped takes it back with undo_steps.
  void step(double lr, const torch::Tensor& skip = {});
  void undo_steps(int64_t n) { step_ -= n; }
  int64_t step_count() const { return step_; }
  std::vector<AdamWParam>& params() { return params_; }

  // Checkpoints write each entry's elements and moments (trainer/loop/outputs.cpp) and read them
  // back whole: `lookup` gives the full-size "<param>.exp_avg", ".exp_avg_sq" and "step"; slices
  // take their part.
  void load_state(const std::function<torch::Tensor(const std::string&)>& lookup);

 private:
  void fused_step(double lr, const torch::Tensor& skip);

  // The fused kernel's lists for one decay group: the entries with a gradient, their parameters'
  // views (where each entry's base stood when they were made) and moments. Kept from step to step:
  // made again only when they change, since making them is host time in every step.
  struct FusedGroup {
    std::vector<size_t> entries;
    std::vector<const void*> bases;
    std::vector<torch::Tensor> params, exp_avgs, exp_avg_sqs, steps;
  };
  FusedGroup& fused_group(bool decay);

  std::vector<AdamWParam> params_;
  FusedGroup decayed_, not_decayed_;
  AdamWOptions options_;
  int64_t step_ = 0;
  torch::Tensor step_on_device_;  // the fused kernel reads the step count from device memory
};

}  // namespace kubetune::optim
