#include "kernels/fp8.h"

#include <torch/library.h>
#include <torch/torch.h>

#ifdef KUBETUNE_HAVE_CUDA_KERNELS
#include <ATen/cuda/CUDAContext.h>
#endif

namespace kubetune::kernels {
namespace {

std::tuple<torch::Tensor, torch::Tensor> quantize_rows_cpu(
    const torch::Tensor& x, const c10::optional<torch::Tensor>& column_scale) {
  TORCH_CHECK(x.dim() == 2, "fp8_quantize_rows: x must be 2-D, got ", x.sizes());
  torch::Tensor y = x.to(torch::kFloat32);
  if (column_scale) y = y * column_scale->to(torch::kFloat32).view({1, -1});
  torch::Tensor amax = std::get<0>(y.abs().max(1, /*keepdim=*/true)).clamp_min(kFp8MinAmax);
  // 448 / amax as a true division, the same float32 arithmetic as the CUDA kernel.
  torch::Tensor inv = torch::full_like(amax, kFp8Max).div(amax);
  return {(y * inv).to(torch::kFloat8_e4m3fn), amax.div(torch::full_like(amax, kFp8Max))};
}

}  // namespace

Fp8Rows quantize_rows_fp8(const torch::Tensor& x, const torch::Tensor& column_scale) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_quantize_rows", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor>(
                           const torch::Tensor&, const c10::optional<torch::Tensor>&)>();
  TORCH_CHECK(!column_scale.defined() || column_scale.numel() == x.size(-1),
              "fp8_quantize_rows: column_scale has ", column_scale.numel(), " values for ",
              x.size(-1), " columns");
  auto [values, scales] =
      op.call(x.contiguous(), column_scale.defined()
                                  ? c10::optional<torch::Tensor>(column_scale.contiguous())
                                  : c10::nullopt);
  return {values, scales};
}

torch::Tensor transpose_fp8(const torch::Tensor& values) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_transpose", "")
                       .typed<torch::Tensor(const torch::Tensor&)>();
  TORCH_CHECK(values.dim() == 2, "fp8_transpose: values must be 2-D, got ", values.sizes());
  return op.call(values.contiguous());
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
  m.def("fp8_quantize_rows(Tensor x, Tensor? column_scale) -> (Tensor values, Tensor scales)");
  m.def("fp8_transpose(Tensor values) -> Tensor");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("fp8_quantize_rows", quantize_rows_cpu);
  m.impl("fp8_transpose", [](const torch::Tensor& v) { return v.t().contiguous(); });
}

}  // namespace kubetune::kernels
