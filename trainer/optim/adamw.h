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
  torch::Tensor values(const torch::Tensor& t) const {
    return whole() ? t : t.view(-1).narrow(0, offset, numel);
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

  std::vector<AdamWParam> params_;
  AdamWOptions options_;
  int64_t step_ = 0;
  torch::Tensor step_on_device_;  // the fused kernel reads the step count from device memory
};

}  // namespace kubetune::optim
