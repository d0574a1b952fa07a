#include "kernels/fp8_from_4bit.h"

#include <torch/library.h>
#include <torch/torch.h>

#include "kernels/fp8.h"

namespace kubetune::kernels {
namespace {

Quant4State state_of(const torch::Tensor& packed, const torch::Tensor& absmax,
                     const c10::optional<torch::Tensor>& nested_absmax, double offset,
                     c10::IntArrayRef shape, int64_t blocksize, c10::string_view type) {
  Quant4State s;
  s.packed = packed;
  s.absmax = absmax;
  if (nested_absmax) s.nested_absmax = *nested_absmax;
  s.offset = offset;
  s.type = std::string(type);
  s.blocksize = blocksize;
  s.shape = shape.vec();
  return s;
}

// The composition, in the quantization's own float32 arithmetic (fp8_values_of_rows).
torch::Tensor fp8_from_4bit_cpu(const torch::Tensor& packed, const torch::Tensor& absmax,
                                const c10::optional<torch::Tensor>& nested_absmax, double offset,
                                c10::IntArrayRef shape, int64_t blocksize, c10::string_view type,
                                c10::ScalarType dtype, const torch::Tensor& row_amax) {
  TORCH_CHECK(shape.size() == 2, "fp8_from_4bit: a 2-D weight, got shape ", shape);
  TORCH_CHECK(row_amax.numel() == shape[0], "fp8_from_4bit: ", row_amax.numel(), " row maxima for ",
              shape[0], " rows");
  const auto state = state_of(packed, absmax, nested_absmax, offset, shape, blocksize, type);
  return fp8_values_of_rows(dequantize_4bit(state, dtype), row_amax);
}

void fp8_from_4bit_transposed_into_cpu(const torch::Tensor& packed, const torch::Tensor& absmax,
                                       const c10::optional<torch::Tensor>& nested_absmax,
                                       double offset, c10::IntArrayRef shape, int64_t blocksize,
                                       c10::string_view type, c10::ScalarType dtype,
                                       const torch::Tensor& row_amax, const torch::Tensor& out,
                                       int64_t first_column) {
  const torch::Tensor values = fp8_from_4bit_cpu(packed, absmax, nested_absmax, offset, shape,
                                                 blocksize, type, dtype, row_amax);
  TORCH_CHECK(out.dim() == 2 && out.scalar_type() == torch::kFloat8_e4m3fn &&
                  out.size(0) == shape[1] && first_column >= 0 &&
                  first_column + shape[0] <= out.size(1),
              "fp8_from_4bit_transposed_into: out ", out.sizes(), " cannot take the transpose of ",
              shape, " at column ", first_column);
  out.narrow(1, first_column, shape[0]).copy_(values.t());
}

}  // namespace

torch::Tensor row_amax_4bit(const Quant4State& state, torch::ScalarType dtype) {
  const torch::Tensor w = dequantize_4bit(state, dtype).reshape({state.shape.at(0), -1});
  return std::get<0>(w.abs().max(1)).to(torch::kFloat32).clamp_min(kFp8MinAmax);
}

torch::Tensor fp8_from_4bit(const Quant4State& s, const torch::Tensor& row_amax,
                            torch::ScalarType dtype, bool transposed) {
  if (transposed) {
    torch::Tensor out = torch::empty({s.shape.at(1), s.shape.at(0)},
                                     s.packed.options().dtype(torch::kFloat8_e4m3fn));
    fp8_from_4bit_transposed_into(s, row_amax, dtype, out, 0);
    return out;
  }
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("kubetune::fp8_from_4bit", "")
          .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                               const c10::optional<torch::Tensor>&, double, c10::IntArrayRef,
                               int64_t, c10::string_view, c10::ScalarType, const torch::Tensor&)>();
  const c10::optional<torch::Tensor> nested =
      s.double_quant() ? c10::optional<torch::Tensor>(s.nested_absmax) : c10::nullopt;
  return op.call(s.packed, s.absmax, nested, s.offset, s.shape, s.blocksize, s.type, dtype,
                 row_amax.contiguous());
}

void fp8_from_4bit_transposed_into(const Quant4State& s, const torch::Tensor& row_amax,
                                   torch::ScalarType dtype, torch::Tensor& out,
                                   int64_t first_column) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::fp8_from_4bit_transposed_into", "")
                       .typed<void(const torch::Tensor&, const torch::Tensor&,
                                   const c10::optional<torch::Tensor>&, double, c10::IntArrayRef,
                                   int64_t, c10::string_view, c10::ScalarType, const torch::Tensor&,
                                   const torch::Tensor&, int64_t)>();
  const c10::optional<torch::Tensor> nested =
      s.double_quant() ? c10::optional<torch::Tensor>(s.nested_absmax) : c10::nullopt;
  op.call(s.packed, s.absmax, nested, s.offset, s.shape, s.blocksize, s.type, dtype,
          row_amax.contiguous(), out, first_column);
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def(
      "fp8_from_4bit(Tensor packed, Tensor absmax, Tensor? nested_absmax, float offset, "
      "int[] shape, int blocksize, str type, ScalarType dtype, Tensor row_amax) -> Tensor");
  m.def(
      "fp8_from_4bit_transposed_into(Tensor packed, Tensor absmax, Tensor? nested_absmax, "
      "float offset, int[] shape, int blocksize, str type, ScalarType dtype, Tensor row_amax, "
      "Tensor(a!) out, int first_column) -> ()");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("fp8_from_4bit", fp8_from_4bit_cpu);
  m.impl("fp8_from_4bit_transposed_into", fp8_from_4bit_transposed_into_cpu);
}

}  // namespace kubetune::kernels
