// QLoRA's linear layer: with its weight in 4 bits it computes exactly what a plain linear layer
// computes on the dequantized weight, forward and backward, LoRA branch included; merging folds
// the adapter into the dequantized weight. (tests/kernels checks the 4-bit format against
// bitsandbytes; tests/train the training against PEFT+bitsandbytes.)
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "kernels/quant4.h"
#include "trainer/model/layers.h"

namespace kubetune::model {
namespace {

struct Grads {
  torch::Tensor y, dx, da, db;
};

Grads run(Linear& layer, const torch::Tensor& x0, const torch::Tensor& dy) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto y = layer->forward(x);
  y.backward(dy);
  Grads g{y.detach(), x.grad(), {}, {}};
  if (layer->has_lora()) g.da = layer->lora_A().grad(), g.db = layer->lora_B().grad();
  return g;
}

Linear lora_layer(const torch::Tensor& w, const torch::TensorOptions& opts) {
  Linear layer(w.size(1), w.size(0), false, opts);
  torch::NoGradGuard no_grad;
  layer->weight.copy_(w);
  layer->weight.set_requires_grad(false);
  auto a = (torch::randn({4, w.size(1)}, opts) * 0.1).requires_grad_(true);
  auto b = (torch::randn({w.size(0), 4}, opts) * 0.1).requires_grad_(true);
  layer->add_lora(a, b, 2.0, 0.0);
  return layer;
}

// max|a - b| <= tol * max|b|, for each of y, dx and the adapters' gradients.
void expect_same(const Grads& a, const Grads& b, double tol) {
  for (auto [x, y, what] :
       {std::tuple{a.y, b.y, "y"}, std::tuple{a.dx, b.dx, "dx"}, std::tuple{a.da, b.da, "d lora_A"},
        std::tuple{a.db, b.db, "d lora_B"}}) {
    const auto ref = y.cpu().to(torch::kDouble);
    const double diff = (x.cpu().to(torch::kDouble) - ref).abs().max().item<double>();
    EXPECT_LE(diff, tol * ref.abs().max().item<double>()) << what << ": " << diff;
  }
}

void check(const torch::Device& device, torch::ScalarType compute, double tol) {
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(device);
  const auto w = torch::randn({160, 96}, opts) * 0.05;
  const auto x = torch::randn({2, 5, 96}, opts).to(compute),
             dy = torch::randn({2, 5, 160}, opts).to(compute);

  torch::manual_seed(1);
  Linear quantized = lora_layer(w, opts);
  quantized->quantize_4bit("nf4", 64, true, compute);
  ASSERT_TRUE(quantized->is_quantized());
  EXPECT_EQ(quantized->weight.numel(), 0);  // the full-precision copy is gone
  const auto dequantized = kernels::dequantize_4bit(quantized->quantized(), compute);

  torch::manual_seed(1);
  Linear plain = lora_layer(dequantized.to(torch::kFloat32), opts);
  plain->weight.set_data(dequantized);
  expect_same(run(quantized, x, dy), run(plain, x, dy), tol);

  // Merging makes the weight whole in the dtype it was stored in (fp32 here, as bitsandbytes'
  // quant_state.dtype) and adds B A * scaling in fp32.
  const kernels::Quant4State state = quantized->quantized();
  const auto delta = at::matmul(quantized->lora_B().detach().to(torch::kFloat),
                                quantized->lora_A().detach().to(torch::kFloat)) *
                     2.0;
  quantized->merge_lora();
  plain->merge_lora();
  EXPECT_FALSE(quantized->is_quantized());
  const auto stored = quantized->weight.scalar_type();
  const auto expected =
      (kernels::dequantize_4bit(state, stored).to(torch::kFloat) + delta).to(stored);
  EXPECT_TRUE(torch::equal(quantized->weight.cpu(), expected.cpu()));
  // Where the compute dtype is the stored one, that is the plain layer's merge.
  if (compute == stored) {
    EXPECT_TRUE(torch::equal(quantized->weight.cpu(), plain->weight.cpu()));
  }
}

TEST(QLora, LinearEqualsALinearOnTheDequantizedWeight) {
  check(torch::kCPU, torch::kFloat32, 1e-6);
}

TEST(Cuda, QLoraLinearEqualsALinearOnTheDequantizedWeightInBf16) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  // As training runs it: fp32 adapters under bf16 autocast.
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  check(torch::kCUDA, torch::kBFloat16, 1e-2);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
}

}  // namespace
}  // namespace kubetune::model
