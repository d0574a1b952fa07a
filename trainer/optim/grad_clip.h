// Gradient-norm clipping as torch.nn.utils.clip_grad_norm_ does it on GPUs: a handful of
// multi-tensor launches instead of two kernels per parameter.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace kubetune::optim {

// Scales `gradients` so that the global L2 norm is at most `max_norm` (no scaling when
// max_norm <= 0) and returns the norm before scaling, as a 0-dim tensor on the gradients' device
// (reading it is left to the caller, so the host need not wait here).
//
// With gradients split across processes (a sharded optimizer), each process counts `counted`
// (every element counted by exactly one process) and `sum_over_processes` adds up their squared
// norms in place. Without it, `counted` are all the gradients.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& gradients,
                             const std::vector<torch::Tensor>& counted, double max_norm,
                             const std::function<void(torch::Tensor&)>& sum_over_processes = {});

}  // namespace kubetune::optim
