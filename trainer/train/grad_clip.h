// Gradient-norm clipping as torch.nn.utils.clip_grad_norm_ does it on GPUs: a handful of
// multi-tensor launches instead of two kernels per parameter.
#pragma once

#include <torch/types.h>

#include <vector>

namespace kubetune::train {

// Scales the gradients so that their global L2 norm is at most `max_norm` (no scaling when
// max_norm <= 0) and returns the norm before scaling, as a 0-dim tensor on the gradients' device
// (reading it is left to the caller, so the host need not wait here).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace kubetune::train
