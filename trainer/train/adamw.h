// AdamW with the arithmetic of torch.optim.AdamW: on GPUs its fused kernel (fused=True), elsewhere
// the single-tensor path written out. The state is plain named tensors that checkpoints save and
// load without LibTorch's archive format.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

namespace kubetune::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

struct AdamWParam {
  std::string name;
  torch::Tensor param;
  bool decay = true;  // biases and norm weights are not decayed, as in the HF Trainer
  torch::Tensor exp_avg, exp_avg_sq;
};

class AdamW {
 public:
  AdamW(std::vector<AdamWParam> params, AdamWOptions options);
  void step(double lr);
  void zero_grad();
  int64_t step_count() const { return step_; }
  std::vector<AdamWParam>& params() { return params_; }

  // Named state for checkpoints: "<param>.exp_avg", "<param>.exp_avg_sq" and "step".
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load_state(const std::function<torch::Tensor(const std::string&)>& lookup);

 private:
  void fused_step(double lr);

  std::vector<AdamWParam> params_;
  AdamWOptions options_;
  int64_t step_ = 0;
  torch::Tensor step_on_device_;  // the fused kernel reads the step count from device memory
};

}  // namespace kubetune::train
