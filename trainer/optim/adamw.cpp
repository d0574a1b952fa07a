#include "trainer/optim/adamw.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

namespace kubetune::optim {

AdamW::AdamW(std::vector<AdamWParam> params, AdamWOptions options)
    : params_(std::move(params)), options_(options) {
  for (auto& p : params_) {
    if (!p.exp_avg.defined()) p.exp_avg = torch::zeros_like(p.values(p.param));
    if (!p.exp_avg_sq.defined()) p.exp_avg_sq = torch::zeros_like(p.values(p.param));
  }
}

void AdamW::step(double lr, const torch::Tensor& skip) {
  torch::NoGradGuard no_grad;
  ++step_;
  const bool all_cuda_fp32 =
      !params_.empty() && std::all_of(params_.begin(), params_.end(), [](const AdamWParam& p) {
        return p.param.is_cuda() && p.param.scalar_type() == torch::kFloat32;
      });
  if (all_cuda_fp32) {
    fused_step(lr, skip);
    return;
  }
  if (skip.defined() && skip.item<float>() > 0) return;
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(step_));
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(step_));
  const double step_size = lr / bias_correction1;
  const double bias_correction2_sqrt = std::sqrt(bias_correction2);
  for (auto& p : params_) {
    if (!p.param.grad().defined()) continue;
    const auto grad = p.values(p.param.grad());
    auto param = p.values(p.param);
    if (p.decay && options_.weight_decay != 0) param.mul_(1.0 - lr * options_.weight_decay);
    p.exp_avg.lerp_(grad, 1.0 - options_.beta1);
    p.exp_avg_sq.mul_(options_.beta2).addcmul_(grad, grad, 1.0 - options_.beta2);
    auto denom = (p.exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(options_.eps);
    param.addcdiv_(p.exp_avg, denom, -step_size);
  }
}

// torch.optim.AdamW(fused=True)'s kernel: one launch per group of tensors instead of eight passes
// over memory per parameter, which is most of the optimizer's time in full fine-tuning.
void AdamW::fused_step(double lr, const torch::Tensor& skip) {
  if (!step_on_device_.defined())
    step_on_device_ = torch::zeros({}, params_.front().param.options().dtype(torch::kFloat32));
  step_on_device_.fill_(static_cast<double>(step_));
  for (const bool decay : {true, false}) {
    FusedGroup& group = fused_group(decay);
    if (group.entries.empty()) continue;
    std::vector<torch::Tensor> grads;  // new tensors every step (dropped after each update)
    grads.reserve(group.entries.size());
    for (const size_t i : group.entries) grads.push_back(params_[i].values(params_[i].param.grad()));
    at::_fused_adamw_(
        group.params, grads, group.exp_avgs, group.exp_avg_sqs, /*max_exp_avg_sqs=*/{},
        group.steps, lr, options_.beta1, options_.beta2, decay ? options_.weight_decay : 0.0,
        options_.eps, /*amsgrad=*/false,
        /*maximize=*/false,
        /*grad_scale=*/std::nullopt,
        /*found_inf=*/skip.defined() ? std::optional<at::Tensor>(skip) : std::nullopt);
  }
}

AdamW::FusedGroup& AdamW::fused_group(bool decay) {
  FusedGroup& group = decay ? decayed_ : not_decayed_;
  std::vector<size_t> entries;
  std::vector<const void*> bases;
  for (size_t i = 0; i < params_.size(); ++i) {
    const AdamWParam& p = params_[i];
    if (p.decay != decay || !p.param.grad().defined()) continue;
    entries.push_back(i);
    bases.push_back(p.param.data_ptr());
  }
  if (entries == group.entries && bases == group.bases) return group;
  group = FusedGroup{std::move(entries), std::move(bases), {}, {}, {}, {}};
  for (const size_t i : group.entries) {
    AdamWParam& p = params_[i];
    group.params.push_back(p.values(p.param));
    group.exp_avgs.push_back(p.exp_avg);
    group.exp_avg_sqs.push_back(p.exp_avg_sq);
    group.steps.push_back(step_on_device_);
  }
  return group;
}

void AdamW::load_state(const std::function<torch::Tensor(const std::string&)>& lookup) {
  torch::NoGradGuard no_grad;
  for (auto& p : params_) {
    p.exp_avg.copy_(p.named_values(lookup(p.name + ".exp_avg").contiguous()));
    p.exp_avg_sq.copy_(p.named_values(lookup(p.name + ".exp_avg_sq").contiguous()));
  }
  step_ = lookup("step").item<int64_t>();
}

}  // namespace kubetune::optim
