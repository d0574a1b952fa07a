#include "kernels/rope.h"

#include <torch/autograd.h>
#include <torch/library.h>
#include <torch/torch.h>

namespace kubetune::kernels {
namespace {

// Per frequency i < half, with (x1, x2) = (x[i], x[i + half]) and c, s taken at i and i + half:
//   forward:  out1 = x1 c1 - x2 s1,   out2 = x2 c2 + x1 s2
//   inverse:  out1 = x1 c1 + x2 s2,   out2 = x2 c2 - x1 s1   (the transpose: the backward)
torch::Tensor rope_rotate_cpu(const torch::Tensor& x, const torch::Tensor& cos,
                              const torch::Tensor& sin, bool inverse) {
  const int64_t half = x.size(-1) / 2;
  auto xf = x.to(torch::kFloat32);
  auto c = cos.to(torch::kFloat32).unsqueeze(2), s = sin.to(torch::kFloat32).unsqueeze(2);
  auto x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  auto c1 = c.narrow(-1, 0, half), c2 = c.narrow(-1, half, half);
  auto s1 = s.narrow(-1, 0, half), s2 = s.narrow(-1, half, half);
  auto out = inverse ? torch::cat({x1 * c1 + x2 * s2, x2 * c2 - x1 * s1}, -1)
                     : torch::cat({x1 * c1 - x2 * s1, x2 * c2 + x1 * s2}, -1);
  return out.to(x.scalar_type());
}

torch::Tensor rope_rotate(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin, bool inverse) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::rope_rotate", "")
                       .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                                            const torch::Tensor&, bool)>();
  return op.call(x, cos, sin, inverse);
}

class RopeFunction : public torch::autograd::Function<RopeFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    return rope_rotate(x, cos, sin, /*inverse=*/false);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    return {rope_rotate(grads[0].contiguous(), saved[0], saved[1], /*inverse=*/true),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(x.dim() == 4 && x.size(-1) % 2 == 0,
              "rope: x must be [batch, tokens, heads, head_dim] with an even head_dim");
  TORCH_CHECK(cos.dim() == 3 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(0) &&
                  cos.size(1) == x.size(1) && cos.size(2) == x.size(3),
              "rope: cos and sin must be [batch, tokens, head_dim] like x");
  TORCH_CHECK(cos.scalar_type() == sin.scalar_type(), "rope: cos and sin dtypes differ");
  return RopeFunction::apply(x.contiguous(), cos.contiguous(), sin.contiguous());
}

torch::Tensor rope_reference(const torch::Tensor& x, const torch::Tensor& cos,
                             const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(2) + rotated * sin.unsqueeze(2);
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def("rope_rotate(Tensor x, Tensor cos, Tensor sin, bool inverse) -> Tensor");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) { m.impl("rope_rotate", rope_rotate_cpu); }

}  // namespace kubetune::kernels
