#include "trainer/model/linear_4bit.h"

#include <torch/autograd.h>

namespace kubetune::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

class Linear4bitFunction : public torch::autograd::Function<Linear4bitFunction> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x,
                               const kernels::Quant4State* s, int64_t compute_dtype) {
    save_quant4_for_backward(ctx, *s);
    ctx->saved_data["compute_dtype"] = compute_dtype;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    const auto dtype = static_cast<torch::ScalarType>(compute_dtype);
    const torch::Tensor w = kernels::dequantize_4bit(*s, dtype);
    // As bitsandbytes' Linear4bit: the product in the compute dtype, the result in the input's
    // (an fp32 model with bf16 compute gave bf16 values beside fp32 queries and keys).
    return at::matmul(x.to(dtype), w.t()).to(x.scalar_type());
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["compute_dtype"].toInt());
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const torch::Tensor w = kernels::dequantize_4bit(restore_quant4(ctx), dtype);
    torch::Tensor dx = at::matmul(grads[0].to(dtype), w).to(x_dtype);
    return {dx, {}, {}};
  }
};

}  // namespace

void save_quant4_for_backward(AutogradContext* ctx, const kernels::Quant4State& s,
                              std::vector<torch::Tensor> more) {
  std::vector<torch::Tensor> saved{s.packed, s.absmax, s.nested_absmax};
  saved.insert(saved.end(), more.begin(), more.end());
  ctx->save_for_backward(saved);
  ctx->saved_data["offset"] = s.offset;
  ctx->saved_data["blocksize"] = s.blocksize;
  ctx->saved_data["type"] = s.type;
  ctx->saved_data["shape"] = s.shape;
}

kernels::Quant4State restore_quant4(AutogradContext* ctx) {
  const auto saved = ctx->get_saved_variables();
  kernels::Quant4State s;
  s.packed = saved[0];
  s.absmax = saved[1];
  if (saved[2].defined()) s.nested_absmax = saved[2];
  s.offset = ctx->saved_data["offset"].toDouble();
  s.blocksize = ctx->saved_data["blocksize"].toInt();
  s.type = ctx->saved_data["type"].toStringRef();
  s.shape = ctx->saved_data["shape"].toIntVector();
  return s;
}

torch::Tensor linear_4bit(const torch::Tensor& x, const kernels::Quant4State& weight,
                          torch::ScalarType compute_dtype) {
  return Linear4bitFunction::apply(x, &weight, static_cast<int64_t>(compute_dtype));
}

}  // namespace kubetune::model
