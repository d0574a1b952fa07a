#include "kernels/cross_entropy.h"

#include <torch/library.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

// CPU reference: LibTorch's own operations, in fp32.
std::tuple<torch::Tensor, torch::Tensor> logsumexp_target_cpu(const torch::Tensor& logits,
                                                              const torch::Tensor& targets) {
  auto x = logits.to(torch::kFloat32);
  return {torch::logsumexp(x, {1}), x.gather(1, targets.unsqueeze(1)).squeeze(1)};
}

torch::Tensor cross_entropy_backward_cpu(torch::Tensor logits, const torch::Tensor& lse,
                                         const torch::Tensor& targets,
                                         const torch::Tensor& grad_scale) {
  auto d = (logits.to(torch::kFloat32) - lse.unsqueeze(1)).exp_();
  d.scatter_add_(1, targets.unsqueeze(1), torch::full({d.size(0), 1}, -1.0, d.options()));
  d.mul_(grad_scale.to(torch::kFloat32));
  logits.copy_(d);
  return logits;
}

void check_shapes(const torch::Tensor& logits, const torch::Tensor& targets) {
  TORCH_CHECK(logits.dim() == 2, "cross entropy: logits must be [rows, vocab]");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cross entropy: targets must be [rows] like the logits' first dimension");
  TORCH_CHECK(targets.scalar_type() == torch::kInt64, "cross entropy: targets must be int64");
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> logsumexp_target(const torch::Tensor& logits,
                                                         const torch::Tensor& targets) {
  check_shapes(logits, targets);
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::logsumexp_target", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&,
                                                                       const torch::Tensor&)>();
  torch::NoGradGuard no_grad;
  auto [lse, picked] = op.call(logits.contiguous(), targets.contiguous());
  return {lse, picked};
}

void cross_entropy_backward_(torch::Tensor& logits, const torch::Tensor& lse,
                             const torch::Tensor& targets, const torch::Tensor& grad_scale) {
  check_shapes(logits, targets);
  TORCH_CHECK(logits.is_contiguous(), "cross_entropy_backward_: logits must be contiguous");
  TORCH_CHECK(grad_scale.numel() == 1, "cross_entropy_backward_: grad_scale must be a scalar");
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::cross_entropy_backward_", "")
                       .typed<torch::Tensor(torch::Tensor, const torch::Tensor&,
                                            const torch::Tensor&, const torch::Tensor&)>();
  torch::NoGradGuard no_grad;
  op.call(logits, lse.to(torch::kFloat32).contiguous(), targets.contiguous(),
          grad_scale.to(torch::kFloat32));
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def("logsumexp_target(Tensor logits, Tensor targets) -> (Tensor, Tensor)");
  m.def(
      "cross_entropy_backward_(Tensor(a!) logits, Tensor lse, Tensor targets, Tensor grad_scale) "
      "-> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("logsumexp_target", logsumexp_target_cpu);
  m.impl("cross_entropy_backward_", cross_entropy_backward_cpu);
}

}  // namespace kubetune::kernels
