#include "kernels/fp8.h"

#include <torch/library.h>
#include <torch/torch.h>

#ifdef KUBETUNE_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#endif

namespace kubetune::kernels {
namespace {

std::tuple<torch::Tensor, torch::Tensor> quantize_rows_cpu(
    at::TensorList parts, const c10::optional<torch::Tensor>& column_scale) {
  TORCH_CHECK(!parts.empty(), "fp8_quantize_rows: no parts");
  for (const auto& part : parts)
    TORCH_CHECK(part.dim() == 2, "fp8_quantize_rows: parts must be 2-D, got ", part.sizes());
  torch::Tensor y = torch::cat(parts, 1).to(torch::kFloat32);
  if (column_scale) y = y * column_scale->to(torch::kFloat32).view({1, -1});
  torch::Tensor amax = std::get<0>(y.abs().max(1, /*keepdim=*/true)).clamp_min(kFp8MinAmax);
  return {fp8_values_of_rows(y, amax), fp8_row_scales(amax)};
}

void transpose_into_cpu(const torch::Tensor& values, const torch::Tensor& out,
                        int64_t first_column) {
  TORCH_CHECK(values.dim() == 2 && out.dim() == 2 && out.size(0) == values.size(1) &&
                  first_column >= 0 && first_column + values.size(0) <= out.size(1) &&
                  values.scalar_type() == out.scalar_type(),
              "fp8_transpose_into: out ", out.scalar_type(), " ", out.sizes(),
              " cannot take the transpose of ", values.scalar_type(), " ", values.sizes(),
              " at column ", first_column);
  out.narrow(1, first_column, values.size(0)).copy_(values.t());
}

// The reference: the dequantized product in float32 added to out, rounded once.
void mm_add_cpu(const torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& a_scales,
                const torch::Tensor& b, const torch::Tensor& b_scales, bool /*fast_accumulate*/) {
  const auto product = at::mm(dequantize_rows_fp8({a, a_scales}, torch::kFloat32),
                              dequantize_rows_fp8({b, b_scales}, torch::kFloat32).t());
  out.copy_(out.to(torch::kFloat32) + product);
}

}  // namespace

torch::Tensor fp8_row_scales(const torch::Tensor& row_amax) {
  const torch::Tensor amax = row_amax.to(torch::kFloat32).view({-1, 1});
  return amax.div(torch::full_like(amax, kFp8Max));
}

torch::Tensor fp8_values_of_rows(const torch::Tensor& x, const torch::Tensor& row_amax) {
  const torch::Tensor amax = row_amax.to(torch::kFloat32).view({-1, 1});
  // 448 / amax as a true division, the same float32 arithmetic as the CUDA kernels.
  return (x.to(torch::kFloat32) * torch::full_like(amax, kFp8Max).div(amax))
      .to(torch::kFloat8_e4m3fn);
}

Fp8Rows quantize_rows_fp8(const std::vector<torch::Tensor>& parts,
                          const torch::Tensor& column_scale) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_quantize_rows", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor>(
                           at::TensorList, const c10::optional<torch::Tensor>&)>();
  int64_t cols = 0;
  for (const auto& part : parts) cols += part.size(-1);
  TORCH_CHECK(!column_scale.defined() || column_scale.numel() == cols,
              "fp8_quantize_rows: column_scale has ", column_scale.numel(), " values for ", cols,
              " columns");
  auto [values, scales] = op.call(
      parts, column_scale.defined() ? c10::optional<torch::Tensor>(column_scale.contiguous())
                                    : c10::nullopt);
  return {values, scales};
}

Fp8Rows quantize_rows_fp8(const torch::Tensor& x, const torch::Tensor& column_scale) {
  return quantize_rows_fp8(std::vector<torch::Tensor>{x}, column_scale);
}

torch::Tensor transpose_fp8(const torch::Tensor& values) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_transpose", "")
                       .typed<torch::Tensor(const torch::Tensor&)>();
  TORCH_CHECK(values.dim() == 2, "fp8_transpose: values must be 2-D, got ", values.sizes());
  return op.call(values.contiguous());
}

void transpose_fp8_into(const torch::Tensor& values, torch::Tensor& out, int64_t first_column) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_transpose_into", "")
                       .typed<void(const torch::Tensor&, const torch::Tensor&, int64_t)>();
  op.call(values, out, first_column);
}

Fp8Transposed transposed(const Fp8Rows& w) { return {transpose_fp8(w.values), w.scales}; }

torch::Tensor dequantize_rows_fp8(const Fp8Rows& q, torch::ScalarType dtype) {
  return (q.values.to(torch::kFloat32) * q.scales).to(dtype);
}

torch::Tensor fp8_mm(const Fp8Rows& a, const Fp8Rows& b, torch::ScalarType out_dtype,
                     bool fast_accumulate) {
  TORCH_CHECK(a.cols() == b.cols(), "fp8_mm: inner sizes differ (", a.cols(), " and ", b.cols(),
              ")");
  if (!a.values.is_cuda()) {
    return at::mm(dequantize_rows_fp8(a, torch::kFloat32),
                  dequantize_rows_fp8(b, torch::kFloat32).t())
        .to(out_dtype);
  }
  // cuBLASLt takes the second operand column-major: b's rows are its columns.
  return at::_scaled_mm(a.values, b.values.t(), a.scales, b.scales.view({1, -1}), c10::nullopt,
                        c10::nullopt, out_dtype, fast_accumulate);
}

void fp8_mm_add_(torch::Tensor& out, const Fp8Rows& a, const Fp8Rows& b, bool fast_accumulate) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_mm_add_", "")
                       .typed<void(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                   const torch::Tensor&, const torch::Tensor&, bool)>();
  TORCH_CHECK(a.cols() == b.cols() && out.dim() == 2 && out.size(0) == a.rows() &&
                  out.size(1) == b.rows() && out.is_contiguous(),
              "fp8_mm_add_: out ", out.sizes(), " cannot take ", a.values.sizes(), " times ",
              b.values.sizes(), " transposed (out must be contiguous)");
  for (const auto& [name, t] : {std::pair{"a", &a.values}, std::pair{"a's scales", &a.scales},
                                std::pair{"b", &b.values}, std::pair{"b's scales", &b.scales}})
    TORCH_CHECK(t->is_contiguous() && t->device() == out.device(), "fp8_mm_add_: ", name,
                " must be contiguous and on out's device ", out.device(), ", got ", t->sizes(),
                " strides ", t->strides(), " on ", t->device());
  TORCH_CHECK(a.values.scalar_type() == torch::kFloat8_e4m3fn &&
                  b.values.scalar_type() == torch::kFloat8_e4m3fn &&
                  a.scales.scalar_type() == torch::kFloat32 &&
                  b.scales.scalar_type() == torch::kFloat32 && a.scales.numel() == a.rows() &&
                  b.scales.numel() == b.rows(),
              "fp8_mm_add_: float8_e4m3fn values with one float32 scale per row, got a ",
              a.values.scalar_type(), " ", a.values.sizes(), " with ", a.scales.scalar_type(), " ",
              a.scales.sizes(), " scales and b ", b.values.scalar_type(), " ", b.values.sizes(),
              " with ", b.scales.scalar_type(), " ", b.scales.sizes());
  op.call(out, a.values, a.scales, b.values, b.scales, fast_accumulate);
}

bool fp8_shape_supported(int64_t rows, int64_t cols) { return rows % 16 == 0 && cols % 16 == 0; }

bool fp8_supported_on(const torch::Device& device) {
  if (!device.is_cuda()) return true;
#ifdef KUBETUNE_HAVE_CUDA_KERNELS
  return at::cuda::getDeviceProperties(device.index())->major >= 9;
#else
  return false;
#endif
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def(
      "fp8_quantize_rows(Tensor[] parts, Tensor? column_scale) -> (Tensor values, Tensor scales)");
  m.def("fp8_transpose(Tensor values) -> Tensor");
  m.def(
      "fp8_mm_add_(Tensor(a!) out, Tensor a, Tensor a_scales, Tensor b, Tensor b_scales, bool "
      "fast_accumulate) -> ()");
  m.def("fp8_transpose_into(Tensor values, Tensor(a!) out, int first_column) -> ()");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("fp8_quantize_rows", quantize_rows_cpu);
  m.impl("fp8_transpose", [](const torch::Tensor& v) { return v.t().contiguous(); });
  m.impl("fp8_transpose_into", transpose_into_cpu);
  m.impl("fp8_mm_add_", mm_add_cpu);
}

}  // namespace kubetune::kernels
