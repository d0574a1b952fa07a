// The two memory-bound halves of a cross-entropy over a [rows, vocab] chunk of logits, each as one
// pass that reads the logits in their own dtype and does the arithmetic in fp32:
//   forward:  lse[i] = logsumexp(logits[i, :]), picked[i] = logits[i, target[i]]
//   backward: logits[i, j] <- g * (exp(logits[i, j] - lse[i]) - [j == target[i]])   (in place)
// Unfused, the same work is a cast to fp32, a max, a subtraction, exps, a sum, a scatter, a scale
// and a cast back, each a full pass over rows x vocab values. Custom ops kubetune::logsumexp_target
// and kubetune::cross_entropy_backward_ (TORCH_LIBRARY), with a CPU reference and a CUDA kernel.
#pragma once

#include <torch/types.h>

#include <utility>

namespace kubetune::kernels {

// logits [rows, vocab] (fp32, bf16 or fp16), targets [rows] int64 in [0, vocab).
// Returns {lse, picked}, both fp32 [rows]. Not differentiable: the loss's own backward uses
// cross_entropy_backward_.
std::pair<torch::Tensor, torch::Tensor> logsumexp_target(const torch::Tensor& logits,
                                                         const torch::Tensor& targets);

// Overwrites `logits` with the gradient of g * sum_i (lse[i] - logits[i, target[i]]) with respect
// to the logits. grad_scale is a 0-dim fp32 tensor (read on the device, so no host sync).
void cross_entropy_backward_(torch::Tensor& logits, const torch::Tensor& lse,
                             const torch::Tensor& targets, const torch::Tensor& grad_scale);

}  // namespace kubetune::kernels
