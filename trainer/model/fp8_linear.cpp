#include "trainer/model/fp8_linear.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "trainer/model/frozen_linear_group.h"
#include "trainer/model/layers.h"

namespace kubetune::model {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Every FP8 product of the step accumulates in the tensor cores' own precision (fp8_linear.h).
constexpr bool kFastAccumulate = true;

std::vector<int64_t> with_last(std::vector<int64_t> sizes, int64_t last) {
  sizes.back() = last;
  return sizes;
}

// [n, 1] float32 ones on `options`' device: the scales of W^T's rows. Kept (one per thread, grown
// as needed) instead of a fill kernel for each of the step's input gradients.
Tensor unit_scales(int64_t n, const torch::TensorOptions& options) {
  thread_local Tensor ones;
  if (!ones.defined() || ones.numel() < n || ones.device() != options.device())
    ones = at::ones({std::max<int64_t>(n, ones.defined() ? ones.numel() : 0)}, options);
  return ones.narrow(0, 0, n).view({n, 1});
}

// W^T's values `wt` as the second operand of dx = g W, for g = dy quantized with W's row scales
// folded in: dx[m, k] = sum_n dy[m, n] s[n] q[n, k], W's row scales s lie along the sum, so they
// go into dy before it is quantized, and W^T's rows have scale 1.
kernels::Fp8Rows unit_scaled(const Tensor& wt) {
  return {wt, unit_scales(wt.size(0), wt.options().dtype(torch::kFloat32))};
}

Tensor input_gradient_of_quantized(const kernels::Fp8Rows& g, const Tensor& wt,
                                   torch::ScalarType out_dtype) {
  return kernels::fp8_mm(g, unit_scaled(wt), out_dtype, kFastAccumulate);
}

// The group `layers` were kept transposed as (keep_fp8_transposed), when they are all of it in
// its order; null otherwise.
const Fp8TransposedGroup* kept_group(const std::vector<const LinearImpl*>& layers) {
  if (layers.empty()) return nullptr;
  const Fp8TransposedGroup* group = layers.front()->fp8_transposed_group();
  if (!group) return nullptr;
  int64_t column = 0;
  for (const auto* l : layers) {
    if (l->fp8_transposed_group() != group || l->fp8_transposed_column() != column) return nullptr;
    column += l->out_features();
  }
  return column == group->values.size(1) ? group : nullptr;
}

// The layers' W^T side by side, [in, sum of out] float8: the kept group, or made now.
Tensor group_transposed_values(const std::vector<const LinearImpl*>& layers,
                               const torch::TensorOptions& options) {
  if (const auto* kept = kept_group(layers)) return kept->values;
  int64_t total = 0;
  for (const auto* l : layers) total += l->out_features();
  Tensor wt = at::empty({layers[0]->in_features(), total}, options.dtype(torch::kFloat8_e4m3fn));
  int64_t column = 0;
  for (const auto* l : layers) {
    l->fp8_base_transposed_into(wt, column);
    column += l->out_features();
  }
  return wt;
}

class Fp8FrozenFunction : public torch::autograd::Function<Fp8FrozenFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const LinearImpl* layer,
                        int64_t dtype) {
    const auto product_dtype = static_cast<torch::ScalarType>(dtype);
    ctx->saved_data["layer"] = reinterpret_cast<int64_t>(layer);
    ctx->saved_data["dtype"] = dtype;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    const auto xq = kernels::quantize_rows_fp8(x.reshape({-1, x.size(-1)}));
    const Tensor y = fp8_forward_product(xq, layer->fp8_base(), product_dtype);
    return y.view(with_last(x.sizes().vec(), y.size(-1)));
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto* layer = reinterpret_cast<const LinearImpl*>(ctx->saved_data["layer"].toInt());
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const Tensor dy = grads[0].reshape({-1, grads[0].size(-1)}).to(dtype);
    const Tensor dx = fp8_input_gradient(dy, layer->fp8_base_transposed(), dtype);
    return {dx.view(ctx->saved_data["x_sizes"].toIntVector()).to(x_dtype), {}, {}};
  }
};

class Fp8LinearFunction : public torch::autograd::Function<Fp8LinearFunction> {
 public:
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                        int64_t dtype) {
    const auto product_dtype = static_cast<torch::ScalarType>(dtype);
    const Tensor x2 = x.reshape({-1, x.size(-1)}).to(product_dtype);
    const auto wq = kernels::quantize_rows_fp8(weight.detach());
    const Tensor y = fp8_forward_product(kernels::quantize_rows_fp8(x2), wq, product_dtype);
    // Backward keeps the input in the compute dtype (for dW) and the weight in FP8 (for dx).
    ctx->save_for_backward({x2, wq.values, wq.scales});
    ctx->saved_data["dtype"] = dtype;
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    return y.view(with_last(x.sizes().vec(), y.size(-1)));
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor& x2 = saved[0];
    const kernels::Fp8Rows wq{saved[1], saved[2]};
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const Tensor dy = grads[0].reshape({-1, grads[0].size(-1)}).to(dtype);
    Tensor dx, dw;
    if (ctx->needs_input_grad(0)) {
      const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
      dx = fp8_input_gradient(dy, kernels::transposed(wq), dtype)
               .view(ctx->saved_data["x_sizes"].toIntVector())
               .to(x_dtype);
    }
    if (ctx->needs_input_grad(1)) {
      const auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
      dw = at::mm(dy.t(), x2).to(w_dtype);
    }
    return {dx, dw, {}};
  }
};

}  // namespace

Tensor fp8_forward_product(const kernels::Fp8Rows& x, const kernels::Fp8Rows& w,
                           torch::ScalarType out_dtype) {
  return kernels::fp8_mm(x, w, out_dtype, kFastAccumulate);
}

void fp8_forward_product_add_(Tensor& y, const kernels::Fp8Rows& x, const kernels::Fp8Rows& w) {
  kernels::fp8_mm_add_(y, x, w, kFastAccumulate);
}

Tensor fp8_input_gradient(const Tensor& dy, const kernels::Fp8Transposed& w,
                          torch::ScalarType out_dtype) {
  return input_gradient_of_quantized(kernels::quantize_rows_fp8(dy, w.row_scales.view({-1})),
                                     w.values, out_dtype);
}

Tensor fp8_group_row_scales(const std::vector<const LinearImpl*>& layers) {
  if (const auto* kept = kept_group(layers)) return kept->row_scales;
  std::vector<Tensor> scales;
  for (const auto* l : layers) scales.push_back(l->fp8_base_row_scales().view({-1}));
  return scales.size() == 1 ? scales[0] : at::cat(scales, 0);
}

Tensor fp8_group_input_gradient(const kernels::Fp8Rows& dy,
                                const std::vector<const LinearImpl*>& layers,
                                torch::ScalarType out_dtype) {
  TORCH_CHECK(!layers.empty(), "fp8_group_input_gradient: no layers");
  return input_gradient_of_quantized(dy, group_transposed_values(layers, dy.values.options()),
                                     out_dtype);
}

void fp8_group_input_gradient_add_(Tensor& dx, const kernels::Fp8Rows& dy,
                                   const std::vector<const LinearImpl*>& layers) {
  TORCH_CHECK(!layers.empty(), "fp8_group_input_gradient_add_: no layers");
  kernels::fp8_mm_add_(dx, dy, unit_scaled(group_transposed_values(layers, dy.values.options())),
                       kFastAccumulate);
}

kernels::Fp8Rows fp8_group_output_gradients(const std::vector<Tensor>& dys,
                                            const std::vector<const LinearImpl*>& layers) {
  TORCH_CHECK(!layers.empty() && dys.size() == layers.size(),
              "fp8_group_output_gradients: one output gradient per layer");
  return kernels::quantize_rows_fp8(dys, fp8_group_row_scales(layers));
}

void keep_fp8_transposed(const std::vector<LinearImpl*>& layers) {
  // Layers that never run as one group (under LoRA dropout, say) take their input gradients one
  // by one: kept side by side, each would copy its columns out of the group in every step.
  if (layers.size() > 1 && !layers_can_group(layers)) {
    for (auto* l : layers) keep_fp8_transposed({l});
    return;
  }
  std::vector<const LinearImpl*> members;
  for (const auto* l : layers) {
    if (!l->keeps_fp8_base()) return;
    members.push_back(l);
  }
  if (members.empty() || kept_group(members)) return;
  const auto options = members.front()->fp8_base().values.options();
  auto group = std::make_shared<const Fp8TransposedGroup>(
      Fp8TransposedGroup{group_transposed_values(members, options), fp8_group_row_scales(members)});
  int64_t column = 0;
  for (auto* l : layers) {
    l->keep_fp8_base_transposed(group, column);
    column += l->out_features();
  }
}

Tensor fp8_frozen_linear(const Tensor& x, const LinearImpl& layer, torch::ScalarType dtype) {
  return Fp8FrozenFunction::apply(x, &layer, static_cast<int64_t>(dtype));
}

Tensor fp8_linear(const Tensor& x, const Tensor& weight, torch::ScalarType dtype) {
  return Fp8LinearFunction::apply(x, weight, static_cast<int64_t>(dtype));
}

}  // namespace kubetune::model
