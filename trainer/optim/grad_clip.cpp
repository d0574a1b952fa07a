#include "trainer/optim/grad_clip.h"

#include <torch/torch.h>

namespace kubetune::optim {

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& gradients,
                             const std::vector<torch::Tensor>& counted, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_processes) {
  torch::NoGradGuard no_grad;
  if (gradients.empty()) return torch::zeros({}, torch::kFloat32);
  torch::Tensor squares = torch::zeros({}, gradients.front().options().dtype(torch::kFloat32));
  if (!counted.empty()) squares = torch::stack(at::_foreach_norm(counted, 2)).square().sum();
  if (sum_over_processes) sum_over_processes(squares);
  const torch::Tensor total = squares.sqrt();
  if (max_norm > 0) {
    // torch's rule, kept on the device: coefficient = max_norm / (norm + 1e-6), at most 1.
    torch::Tensor coefficient = (max_norm / (total + 1e-6)).clamp_max(1.0);
    at::_foreach_mul_(gradients, coefficient);
  }
  return total;
}

}  // namespace kubetune::optim
