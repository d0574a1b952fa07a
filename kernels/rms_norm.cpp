#include "kernels/rms_norm.h"

#include <torch/autograd.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <tuple>

#include "kernels/op_handle.h"

namespace kubetune::kernels {
namespace {

// x viewed as [rows, d]; rstd is [rows] float32.
std::tuple<torch::Tensor, torch::Tensor> rms_norm_forward_cpu(const torch::Tensor& x,
                                                              const torch::Tensor& weight,
                                                              double eps) {
  const auto xf = x.to(torch::kFloat32);
  const auto rstd = torch::rsqrt(xf.pow(2).mean(-1) + eps);
  const auto y = xf * rstd.unsqueeze(-1) * weight.to(torch::kFloat32);
  return {y.to(x.scalar_type()), rstd.reshape(-1)};
}

// dx = rstd * (g - x * rstd^2 * mean(g * x)), g = dy * w.
torch::Tensor rms_norm_backward_cpu(const torch::Tensor& grad, const torch::Tensor& x,
                                    const torch::Tensor& weight, const torch::Tensor& rstd) {
  const auto xf = x.to(torch::kFloat32);
  const auto g = grad.to(torch::kFloat32) * weight.to(torch::kFloat32);
  const auto r = rstd.reshape(xf.sizes().slice(0, xf.dim() - 1)).unsqueeze(-1);
  const auto dx = r * (g - xf * r * r * (g * xf).mean(-1, /*keepdim=*/true));
  return dx.to(x.scalar_type());
}

using Forward = std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&, const torch::Tensor&,
                                                         double);
using Backward = torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                               const torch::Tensor&);

class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    static auto forward_op = op<Forward>("kubetune::rms_norm_forward");
    auto [y, rstd] = forward_op.call(x, weight, eps);
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto backward_op = op<Backward>("kubetune::rms_norm_backward");
    auto saved = ctx->get_saved_variables();
    return {backward_op.call(grads[0].contiguous(), saved[0], saved[1], saved[2]), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool rms_norm_frozen_supported(const torch::Tensor& x, const torch::Tensor& weight) {
  return !weight.requires_grad() && weight.dim() == 1 && x.dim() >= 1 &&
         weight.size(0) == x.size(-1) && weight.scalar_type() == x.scalar_type() &&
         (x.size(-1) * x.element_size()) % 16 == 0;
}

torch::Tensor rms_norm_frozen(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  TORCH_CHECK(rms_norm_frozen_supported(x, weight),
              "rms_norm_frozen: the weight must be frozen, of x's dtype and last dimension, and "
              "that dimension a multiple of 16 bytes");
  return RmsNormFunction::apply(x.contiguous(), weight.contiguous(), eps);
}

torch::Tensor rms_norm_reference(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto xf = x.to(torch::kFloat32);
  const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * weight.to(torch::kFloat32)).to(x.scalar_type());
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def("rms_norm_forward(Tensor x, Tensor weight, float eps) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor rstd) -> Tensor");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("rms_norm_forward", rms_norm_forward_cpu);
  m.impl("rms_norm_backward", rms_norm_backward_cpu);
}

}  // namespace kubetune::kernels
