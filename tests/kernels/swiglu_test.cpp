// The fused SwiGLU op against LibTorch's own silu(gate) * up: values and gradients, on CPU here
// and on CUDA where a GPU is present (skipped, visibly, where not).
#include "kernels/swiglu.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>

namespace kubetune::kernels {
namespace {

struct Result {
  torch::Tensor out, d_gate, d_up;
};

Result run(bool fused, const torch::Tensor& gate0, const torch::Tensor& up0,
           const torch::Tensor& dy) {
  auto gate = gate0.detach().clone().requires_grad_(true);
  auto up = up0.detach().clone().requires_grad_(true);
  auto out = fused ? swiglu(gate, up) : swiglu_reference(gate, up);
  out.backward(dy);
  return {out.detach(), gate.grad(), up.grad()};
}

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double tol, const char* what) {
  auto diff =
      (a.to(torch::kFloat32).cpu() - b.to(torch::kFloat32).cpu()).abs().max().item<double>();
  EXPECT_LE(diff, tol) << what;
}

TEST(SwiGLU, CpuMatchesLibTorchFormulaInFp32) {
  torch::manual_seed(0);
  auto gate = torch::randn({3, 7, 33}) * 4, up = torch::randn({3, 7, 33}),
       dy = torch::randn({3, 7, 33});
  auto fused = run(true, gate, up, dy), ref = run(false, gate, up, dy);
  expect_close(fused.out, ref.out, 1e-5, "forward");
  expect_close(fused.d_gate, ref.d_gate, 1e-5, "d_gate");
  expect_close(fused.d_up, ref.d_up, 1e-5, "d_up");
}

// GeGLU (Gemma) and the packed layout of a fused gate_up_proj (Phi-3), against LibTorch's
// formulas: gelu(gate, "tanh") * up, and the two halves of one tensor.
Result run_gated(bool fused, const torch::Tensor& gate0, const torch::Tensor& up0,
                 const torch::Tensor& dy, GateActivation act, bool packed) {
  auto gate = gate0.detach().clone().requires_grad_(true);
  auto up = up0.detach().clone().requires_grad_(true);
  torch::Tensor out;
  if (!fused) {
    out = gated_reference(gate, up, act);
  } else if (packed) {
    out = gated_activation_packed(torch::cat({gate, up}, -1), act);
  } else {
    out = gated_activation(gate, up, act);
  }
  out.backward(dy);
  return {out.detach(), gate.grad(), up.grad()};
}

TEST(GatedActivation, GegluAndPackedMatchLibTorchFormulasOnCpu) {
  torch::manual_seed(0);
  auto gate = torch::randn({3, 7, 33}) * 4, up = torch::randn({3, 7, 33}),
       dy = torch::randn({3, 7, 33});
  for (auto act : {GateActivation::kSilu, GateActivation::kGeluTanh})
    for (bool packed : {false, true}) {
      auto fused = run_gated(true, gate, up, dy, act, packed);
      auto ref = run_gated(false, gate, up, dy, act, false);
      const std::string what =
          std::string(act == GateActivation::kSilu ? "silu" : "gelu") + (packed ? " packed" : "");
      expect_close(fused.out, ref.out, 1e-5, (what + " forward").c_str());
      expect_close(fused.d_gate, ref.d_gate, 1e-5, (what + " d_gate").c_str());
      expect_close(fused.d_up, ref.d_up, 1e-5, (what + " d_up").c_str());
    }
  EXPECT_THROW(gated_activation_packed(torch::zeros({2, 3}), GateActivation::kSilu), c10::Error);
}

TEST(GatedActivation, CudaGegluAndPackedMatchCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  torch::manual_seed(0);
  for (auto shape : {std::vector<int64_t>{4, 129, 1000}, std::vector<int64_t>{3, 7, 33}})
    for (auto dtype : {torch::kFloat32, torch::kBFloat16})
      for (auto act : {GateActivation::kSilu, GateActivation::kGeluTanh})
        for (bool packed : {false, true}) {
          auto gate = (torch::randn(shape) * 4).to(dtype), up = torch::randn(shape).to(dtype);
          auto dy = torch::randn(shape).to(dtype);
          auto gpu = run_gated(true, gate.cuda(), up.cuda(), dy.cuda(), act, packed);
          auto cpu = run_gated(true, gate, up, dy, act, packed);
          // fp32: tanhf against LibTorch's tanh, on gradients up to about 20 in magnitude.
          const double tol = dtype == torch::kFloat32 ? 5e-5 : 0.06;
          expect_close(gpu.out, cpu.out, tol, "forward");
          expect_close(gpu.d_gate, cpu.d_gate, tol, "d_gate");
          expect_close(gpu.d_up, cpu.d_up, tol, "d_up");
        }
}

// The frozen MLP node's op for a fused gate_up_proj: the packed gradient and the output in one
// pass, against the differentiable packed op's gradient and output.
void check_packed_backward_with_output(torch::Device device, torch::ScalarType dtype, double tol) {
  torch::manual_seed(0);
  for (auto act : {GateActivation::kSilu, GateActivation::kGeluTanh}) {
    auto gate_up = (torch::randn({3, 7, 2 * 40}) * 4).to(dtype).to(device);
    auto dy = torch::randn({3, 7, 40}).to(dtype).to(device);
    auto leaf = gate_up.detach().clone().requires_grad_(true);
    auto out = gated_activation_packed(leaf, act);
    out.backward(dy);
    auto [d_gate_up, recomputed] = gated_packed_backward_with_output(dy, gate_up, act);
    expect_close(d_gate_up.cpu(), leaf.grad().cpu(), tol, "packed gradient");
    expect_close(recomputed.cpu(), out.detach().cpu(), tol, "recomputed output");
    expect_close(gated_packed_forward_op(gate_up, act).cpu(), out.detach().cpu(), tol, "forward");
  }
}

TEST(GatedActivation, PackedBackwardWithOutputMatchesAutogradOnCpu) {
  check_packed_backward_with_output(torch::kCPU, torch::kFloat32, 1e-6);
}

TEST(GatedActivation, CudaPackedBackwardWithOutputMatchesAutograd) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  check_packed_backward_with_output(torch::kCUDA, torch::kFloat32, 1e-6);
  check_packed_backward_with_output(torch::kCUDA, torch::kBFloat16, 1e-6);
}

TEST(SwiGLU, RejectsMismatchedShapes) {
  EXPECT_THROW(swiglu(torch::zeros({2, 3}), torch::zeros({3, 2})), c10::Error);
}

TEST(SwiGLU, CudaKernelMatchesCpuReference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  torch::manual_seed(0);
  // 4 x 129 x 1000 values take the 16-byte path; 3 x 7 x 33 cannot.
  for (auto shape : {std::vector<int64_t>{4, 129, 1000}, std::vector<int64_t>{3, 7, 33}})
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      auto gate = (torch::randn(shape) * 4).to(dtype), up = torch::randn(shape).to(dtype);
      auto dy = torch::randn(shape).to(dtype);
      auto gpu = run(true, gate.cuda(), up.cuda(), dy.cuda());
      auto cpu = run(true, gate, up, dy);
      const double tol = dtype == torch::kFloat32 ? 1e-5 : 0.06;  // bf16: one rounding of |x| <~ 8
      expect_close(gpu.out, cpu.out, tol, "forward");
      expect_close(gpu.d_gate, cpu.d_gate, tol, "d_gate");
      expect_close(gpu.d_up, cpu.d_up, tol, "d_up");
    }
}

}  // namespace
}  // namespace kubetune::kernels
