// SwiGLU that writes its FP8 form too (kernels/swiglu_fp8.h): on the CPU, the quantized values
// against LibTorch's own silu(gate) * up and its autograd gradients, within E4M3's rounding; on
// CUDA, the fused kernels against the separate ops they replace, to the byte (skipped, visibly,
// without a GPU of compute capability 9.0+).
#include "kernels/swiglu_fp8.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "kernels/swiglu.h"

namespace kubetune::kernels {
namespace {

bool have_hopper() {
  return torch::cuda::is_available() && fp8_supported_on(torch::Device(torch::kCUDA, 0));
}

bool same_bytes(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::equal(a.cpu().view(torch::kUInt8), b.cpu().view(torch::kUInt8));
}

// `q` stands for `x` up to E4M3's rounding: 2^-4 relative, and the subnormal step below.
void expect_within_e4m3(const Fp8Rows& q, const torch::Tensor& x, const char* what) {
  const auto back = dequantize_rows_fp8(q, torch::kFloat32);
  const auto bound = x.abs() / 16 + q.scales * std::pow(2.0, -9);
  EXPECT_TRUE(((back - x).abs() <= bound * 1.0001 + 1e-6).all().item<bool>()) << what;
}

TEST(SwigluFp8, CpuValuesAreLibTorchsWithinE4m3Rounding) {
  torch::manual_seed(0);
  const auto gate = (torch::randn({6, 40}) * 3).requires_grad_(), up = torch::randn({6, 40});
  const auto dy = torch::randn({6, 40}), cs = torch::rand({80}) + 0.5;
  const auto y = swiglu_reference(gate, up);
  const auto [out, q] = swiglu_forward_fp8(gate.detach(), up);
  EXPECT_TRUE(torch::allclose(out, y.detach(), 1e-5, 1e-5));
  expect_within_e4m3(q, y.detach(), "forward");

  const auto up_leaf = up.clone().requires_grad_();
  swiglu_reference(gate, up_leaf).backward(dy);
  const auto s = swiglu_backward_fp8(dy, gate.detach(), up, cs);
  EXPECT_TRUE(torch::allclose(s.d_gate, gate.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(s.d_up, up_leaf.grad(), 1e-4, 1e-5));
  EXPECT_TRUE(torch::allclose(s.output, y.detach(), 1e-5, 1e-5));
  // The quantized matrix is [d_gate d_up] with the column scales applied.
  expect_within_e4m3(s.d_gate_up, torch::cat({gate.grad(), up_leaf.grad()}, 1) * cs.view({1, -1}),
                     "gradients");
  // Packed in one tensor (a fused gate_up_proj): the same values, the gradients side by side.
  const auto packed = torch::cat({gate.detach(), up}, 1);
  EXPECT_TRUE(torch::equal(std::get<0>(swiglu_forward_fp8_packed(packed)), out));
  const auto [packed_out, packed_q] = swiglu_forward_fp8_packed(packed);
  EXPECT_TRUE(torch::equal(packed_q.scales, q.scales));
  const auto ps = swiglu_backward_fp8_packed(dy, packed, cs);
  EXPECT_TRUE(torch::equal(ps.d_packed, torch::cat({s.d_gate, s.d_up}, 1)));
  EXPECT_TRUE(torch::equal(ps.d_gate_up.values.view(torch::kUInt8),
                           s.d_gate_up.values.view(torch::kUInt8)));
  EXPECT_TRUE(torch::equal(ps.d_gate_up.scales, s.d_gate_up.scales));
  EXPECT_THROW(swiglu_backward_fp8(dy, gate.detach(), up, torch::ones({79})), c10::Error);
  EXPECT_THROW(swiglu_forward_fp8(torch::zeros({6, 40}), torch::zeros({6, 41})), c10::Error);
}

TEST(SwigluFp8, CudaKernelsWriteTheSeparateOpsBytes) {
  if (!have_hopper()) GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  torch::manual_seed(1);
  // Rows kept in registers (14336, Llama-3.1-8B's width; 1000), read back (20480), and (36, not
  // a whole number of 16-byte packs in bf16 and fp16) the separate ops' own path.
  for (auto dtype : {torch::kBFloat16, torch::kFloat16, torch::kFloat32})
    for (int64_t cols : {14336, 1000, 20480, 36}) {
      const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
      const auto gate = torch::randn({9, cols}, opts) * 3, up = torch::randn({9, cols}, opts);
      const auto dy =
          torch::randn({9, cols}, opts) * torch::logspace(-3.0, 2.0, 9, 10.0, opts).view({-1, 1});
      const auto cs = torch::rand({2 * cols}, opts.dtype(torch::kFloat32)) + 0.5;
      const std::string where = "cols " + std::to_string(cols) + " " + c10::toString(dtype);

      const auto [out, q] = swiglu_forward_fp8(gate, up);
      const auto plain = swiglu_forward_op(gate, up);
      const auto plain_q = quantize_rows_fp8(plain);
      EXPECT_TRUE(torch::equal(out, plain)) << where;
      EXPECT_TRUE(same_bytes(q.values, plain_q.values)) << where;
      EXPECT_TRUE(torch::equal(q.scales, plain_q.scales)) << where;

      for (bool with_cs : {true, false}) {
        const auto s = swiglu_backward_fp8(dy, gate, up, with_cs ? cs : torch::Tensor());
        const auto [d_gate, d_up, output] = swiglu_backward_with_output(dy, gate, up);
        const auto gq = quantize_rows_fp8(std::vector<torch::Tensor>{d_gate, d_up},
                                          with_cs ? cs : torch::Tensor());
        EXPECT_TRUE(torch::equal(s.d_gate, d_gate) && torch::equal(s.d_up, d_up) &&
                    torch::equal(s.output, output))
            << where;
        EXPECT_TRUE(same_bytes(s.d_gate_up.values, gq.values)) << where << " scales " << with_cs;
        EXPECT_TRUE(torch::equal(s.d_gate_up.scales, gq.scales)) << where;
      }

      // Gate and up packed in one tensor (a fused gate_up_proj), read in place: the same bytes,
      // and the gradients packed the same way.
      const auto packed = torch::cat({gate, up}, 1);
      const auto [packed_out, packed_q] = swiglu_forward_fp8_packed(packed);
      EXPECT_TRUE(torch::equal(packed_out, plain)) << where << " packed";
      EXPECT_TRUE(same_bytes(packed_q.values, plain_q.values)) << where << " packed";
      EXPECT_TRUE(torch::equal(packed_q.scales, plain_q.scales)) << where << " packed";
      const bool in_place = cols * torch::elementSize(dtype) % 16 == 0;  // else the separate ops
      for (bool with_cs : {true, false}) {
        const auto column_scale = with_cs ? cs : torch::Tensor();
        const auto ps = swiglu_backward_fp8_packed(dy, packed, column_scale);
        const auto [d_gate, d_up, output] = swiglu_backward_with_output(dy, gate, up);
        const auto gq = quantize_rows_fp8(std::vector<torch::Tensor>{d_gate, d_up}, column_scale);
        EXPECT_TRUE(torch::equal(ps.d_packed, torch::cat({d_gate, d_up}, 1)) &&
                    torch::equal(ps.output, output))
            << where << " packed";
        EXPECT_TRUE(same_bytes(ps.d_gate_up.values, gq.values)) << where << " packed";
        EXPECT_TRUE(torch::equal(ps.d_gate_up.scales, gq.scales)) << where << " packed";
        // Written in place: d_gate and d_up are the halves of d_packed, not copies joined.
        if (in_place) {
          EXPECT_EQ(ps.d_packed.data_ptr(), ps.d_gate.data_ptr()) << where;
          EXPECT_EQ(static_cast<char*>(ps.d_up.data_ptr()),
                    static_cast<char*>(ps.d_gate.data_ptr()) + cols * torch::elementSize(dtype))
              << where;
        }
      }
    }
}

}  // namespace
}  // namespace kubetune::kernels
