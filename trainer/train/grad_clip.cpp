#include "trainer/train/grad_clip.h"

#include <torch/torch.h>

namespace kubetune::train {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({}, torch::kFloat32);
  torch::Tensor total = torch::stack(at::_foreach_norm(grads, 2)).norm(2);
  if (max_norm > 0) {
    // torch's rule, kept on the device: coefficient = max_norm / (norm + 1e-6), at most 1.
    torch::Tensor coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
    at::_foreach_mul_(grads, coefficient);
  }
  return total;
}

}  // namespace kubetune::train
