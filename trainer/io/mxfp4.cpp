#include "trainer/io/mxfp4.h"

#include <ATen/ATen.h>

#include <stdexcept>
#include <vector>

namespace kubetune::io {

at::Tensor dequantize_mxfp4(const at::Tensor& blocks, const at::Tensor& scales,
                            at::ScalarType dtype, const std::string& name) {
  if (blocks.scalar_type() != at::kByte || scales.scalar_type() != at::kByte)
    throw std::runtime_error("tensor \"" + name + "_blocks\" and \"" + name +
                             "_scales\": MXFP4 is stored as uint8");
  if (blocks.dim() < 2 || blocks.sizes().slice(0, blocks.dim() - 1) != scales.sizes())
    throw std::runtime_error("tensor \"" + name + "_blocks\": its shape does not fit \"" + name +
                             "_scales\" (blocks [..., G, 16], scales [..., G])");
  // E2M1: sign, two exponent bits, one mantissa bit.
  static const std::vector<float> kCodes = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const at::Tensor table =
      at::tensor(kCodes, at::TensorOptions().dtype(at::kFloat)).to(blocks.device(), dtype);
  const at::Tensor codes = blocks.to(at::kLong);
  // [..., G, 16, 2]: the low nibble is the even value, the high one the odd.
  const at::Tensor values = at::stack(
      {table.index_select(0, codes.bitwise_and(0x0F).reshape(-1)).view(codes.sizes()),
       table.index_select(0, codes.bitwise_right_shift(4).reshape(-1)).view(codes.sizes())},
      -1);
  const at::Tensor exponents = (scales.to(at::kInt) - 127).unsqueeze(-1).unsqueeze(-1);
  at::Tensor out = at::ldexp(values, exponents).to(dtype);
  std::vector<int64_t> shape = scales.sizes().vec();
  shape.back() *= blocks.size(-1) * 2;
  return out.reshape(shape);
}

}  // namespace kubetune::io
