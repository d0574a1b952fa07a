#include "kernels/rms_norm_rope.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "kernels/op_handle.h"
#include "kernels/rope.h"

namespace kubetune::kernels {
namespace {

using torch::Tensor;

Tensor rotate(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse) {
  static auto rope_op =
      op<Tensor(const Tensor&, const Tensor&, const Tensor&, bool)>("kubetune::rope_rotate");
  return rope_op.call(x, cos, sin, inverse);
}

// 1 / sqrt(mean(x^2) + eps) per head row, in fp32, keeping the last dimension.
Tensor inverse_rms(const Tensor& xf, double eps) {
  return at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

// The norm's output as the unfused GPU path writes it: fp32 arithmetic, rounded once to x's dtype.
Tensor normalized(const Tensor& x, const Tensor& weight, double eps) {
  const Tensor xf = x.to(at::kFloat);
  return (xf * inverse_rms(xf, eps) * weight.to(at::kFloat)).to(x.scalar_type());
}

Tensor forward_cpu(const Tensor& x, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                   double eps) {
  return rotate(normalized(x, weight, eps), cos, sin, /*inverse=*/false);
}

// d(normed) is the gradient rotated back (rounded to its dtype, as the unfused path's RoPE
// backward writes it); then RMSNorm's backward with x_hat = x * rstd and g = d(normed) * weight:
//   dx = rstd * (g - x_hat * mean(g * x_hat)),  dweight = sum over rows of d(normed) * x_hat
std::tuple<Tensor, Tensor> backward_cpu(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                        const Tensor& cos, const Tensor& sin, double eps,
                                        bool weight_grad) {
  const Tensor d_normed = rotate(grad, cos, sin, /*inverse=*/true).to(at::kFloat);
  const Tensor xf = x.to(at::kFloat), rstd = inverse_rms(xf, eps);
  const Tensor x_hat = xf * rstd, g = d_normed * weight.to(at::kFloat);
  const Tensor dx = rstd * (g - x_hat * (g * x_hat).mean(-1, /*keepdim=*/true));
  Tensor dweight = at::empty({0}, weight.options());
  if (weight_grad)
    dweight = (d_normed * x_hat).reshape({-1, x.size(-1)}).sum(0).to(weight.scalar_type());
  return {dx.to(x.scalar_type()), dweight};
}

class RmsNormRopeFunction : public torch::autograd::Function<RmsNormRopeFunction> {
 public:
  static Tensor forward(torch::autograd::AutogradContext* ctx, const Tensor& x,
                        const Tensor& weight, const Tensor& cos, const Tensor& sin, double eps) {
    ctx->save_for_backward({x, weight, cos, sin});
    ctx->saved_data["eps"] = eps;
    static auto forward_op =
        op<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double)>(
            "kubetune::rms_norm_rope_forward");
    return forward_op.call(x, weight, cos, sin, eps);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    static auto backward_op = op<std::tuple<Tensor, Tensor>(
        const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double, bool)>(
        "kubetune::rms_norm_rope_backward");
    const auto saved = ctx->get_saved_variables();
    const bool weight_grad = ctx->needs_input_grad(1);
    auto [dx, dweight] = backward_op.call(grads[0].contiguous(), saved[0], saved[1], saved[2],
                                          saved[3], ctx->saved_data["eps"].toDouble(), weight_grad);
    return {dx, weight_grad ? dweight : Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

}  // namespace

bool rms_norm_rope_fits(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

Tensor rms_norm_rope(const Tensor& x, const Tensor& weight, const Tensor& cos, const Tensor& sin,
                     double eps) {
  TORCH_CHECK(x.dim() == 4 && x.size(-1) % 2 == 0,
              "rms_norm_rope: x must be [batch, tokens, heads, head_dim] with an even head_dim");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(3),
              "rms_norm_rope: weight must be [head_dim]");
  TORCH_CHECK(cos.dim() == 3 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(0) &&
                  cos.size(1) == x.size(1) && cos.size(2) == x.size(3),
              "rms_norm_rope: cos and sin must be [batch, tokens, head_dim] like x");
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type(), "rms_norm_rope: cos and sin dtypes differ");
  return RmsNormRopeFunction::apply(x, weight, cos.contiguous(), sin.contiguous(), eps);
}

Tensor rms_norm_rope_reference(const Tensor& x, const Tensor& weight, const Tensor& cos,
                               const Tensor& sin, double eps) {
  return rope_reference(normalized(x, weight, eps), cos, sin);
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def(
      "rms_norm_rope_forward(Tensor x, Tensor weight, Tensor cos, Tensor sin, float eps) -> "
      "Tensor");
  m.def(
      "rms_norm_rope_backward(Tensor grad, Tensor x, Tensor weight, Tensor cos, Tensor sin, "
      "float eps, bool weight_grad) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("rms_norm_rope_forward", forward_cpu);
  m.impl("rms_norm_rope_backward", backward_cpu);
}

}  // namespace kubetune::kernels
