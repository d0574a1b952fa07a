// A mixture of experts' parts on their own (trainer/model/experts.h): the grouped product against
// one product per expert (on the GPU: LibTorch's grouped GEMM, experts that get no token
// included), 4-bit expert stacks against the dequantized ones, and LoRA targets mapped onto the
// stacks as peft 0.21 maps them. The layers against transformers are in parity_test.cpp.
#include "trainer/model/experts.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <numeric>

#include "kernels/quant4.h"
#include "test_util.h"
#include "trainer/model/lora.h"

namespace kubetune::testing {
namespace {

// Group ends for `counts` tokens per expert, as int32 on `device`.
torch::Tensor ends_of(const std::vector<int64_t>& counts, const torch::Device& device) {
  return torch::tensor(counts, torch::kLong).cumsum(0).to(device, torch::kInt);
}

struct Products {
  torch::Tensor y, dx, dw;
};

Products grouped(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& ends,
                 const torch::Tensor& dy, bool use_grouped_gemm) {
  auto x = x0.detach().clone().requires_grad_(true);
  auto w = w0.detach().clone().requires_grad_(true);
  auto y = model::grouped_linear(x, w, ends, use_grouped_gemm);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

// Experts 1 and 4 get no token; the others different numbers of them.
const std::vector<int64_t> kCounts = {37, 0, 5, 130, 0, 1, 64, 19};

TEST(GroupedLinear, CudaGroupedGemmEqualsOneProductPerExpertForwardAndBackward) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  torch::manual_seed(0);
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t rows = std::accumulate(kCounts.begin(), kCounts.end(), int64_t{0});
  const int64_t experts = static_cast<int64_t>(kCounts.size()), in = 256, out = 384;
  auto x = torch::randn({rows, in}, opts), w = torch::randn({experts, out, in}, opts) * 0.05;
  auto dy = torch::randn({rows, out}, opts);
  const auto ends = ends_of(kCounts, torch::kCUDA);
  const Products gemm = grouped(x, w, ends, dy, true), loop = grouped(x, w, ends, dy, false);
  // Both round bf16 products of fp32 sums: a few bf16 ulps apart at most.
  EXPECT_LT(rel_err(gemm.y, loop.y), 2e-2);
  EXPECT_LT(rel_err(gemm.dx, loop.dx), 2e-2);
  EXPECT_LT(rel_err(gemm.dw, loop.dw), 2e-2);
  // An expert that got no token gets a zero gradient, not garbage.
  EXPECT_EQ(gemm.dw[1].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(gemm.dw[4].abs().max().item<float>(), 0.0f);
  // And against fp32 on the CPU, the reference the parity tests hold to transformers.
  const Products cpu = grouped(x.cpu().to(torch::kFloat), w.cpu().to(torch::kFloat),
                               ends_of(kCounts, torch::kCPU), dy.cpu().to(torch::kFloat), false);
  EXPECT_LT(rel_err(gemm.y.to(torch::kFloat), cpu.y), 2e-2);
  EXPECT_LT(rel_err(gemm.dw.to(torch::kFloat), cpu.dw), 2e-2);
}

TEST(GroupedLinear, EveryRowMeetsItsOwnExpertsWeight) {
  torch::manual_seed(1);
  const int64_t rows = std::accumulate(kCounts.begin(), kCounts.end(), int64_t{0});
  auto x = torch::randn({rows, 6}), w = torch::randn({static_cast<int64_t>(kCounts.size()), 3, 6});
  const auto y = model::grouped_linear(x, w, ends_of(kCounts, torch::kCPU));
  int64_t row = 0;
  for (size_t e = 0; e < kCounts.size(); ++e)
    for (int64_t i = 0; i < kCounts[e]; ++i, ++row)
      ASSERT_TRUE(
          torch::allclose(y[row], torch::mv(w[static_cast<int64_t>(e)], x[row]), 1e-5, 1e-6))
          << "row " << row << " expert " << e;
}

// QLoRA's stacks: 4 bits, computed as the dequantized stacks compute, forward and backward.
TEST(Experts, FourBitStacksComputeAsTheirDequantizedWeights) {
  torch::manual_seed(2);
  auto experts_of = [](model::CausalLM& m) -> model::ExpertsImpl& {
    return *m->model->layers->ptr<model::DecoderLayerImpl>(0)->moe->experts;
  };
  model::CausalLM quantized = load_model(fixture("mixtral")),
                  reference = load_model(fixture("mixtral"));
  model::ExpertsImpl& four_bit = experts_of(quantized);
  model::ExpertsImpl& plain = experts_of(reference);
  {  // the reference's stacks: quantized and dequantized by the same kernels, as one matrix each
    torch::NoGradGuard no_grad;
    for (auto* w : {&plain.gate_up_proj, &plain.down_proj}) {
      const auto state = kernels::quantize_4bit(w->reshape({-1, w->size(2)}), "nf4", 64, true);
      w->copy_(kernels::dequantize_4bit(state, torch::kFloat).view(w->sizes()));
    }
  }
  for (auto* e : {&four_bit, &plain})
    for (auto& p : e->parameters()) p.set_requires_grad(false);
  four_bit.quantize_4bit("nf4", 64, true, torch::kFloat);
  ASSERT_TRUE(four_bit.is_quantized());
  EXPECT_EQ(four_bit.gate_up_proj.numel(), 0) << "the full-precision stack is freed";

  const auto& c = quantized->config();
  const int64_t n = 29;
  auto x0 = torch::randn({n, c.hidden_size});
  // Each token's two experts, distinct; expert 3 gets none.
  auto first = torch::randint(0, 3, {n}), index = torch::stack({first, (first + 1) % 3}, 1);
  auto weights = torch::rand({n, c.experts_per_token});
  auto run = [&](model::ExpertsImpl& experts) {
    auto x = x0.clone().requires_grad_(true);
    auto y = experts.forward(x, index, weights);
    y.backward(torch::ones_like(y));
    return std::pair{y.detach(), x.grad()};
  };
  const auto [y4, dx4] = run(four_bit);
  const auto [y, dx] = run(plain);
  EXPECT_LT(rel_err(y4, y), 1e-5);
  EXPECT_LT(rel_err(dx4, dx), 1e-5);
}

// QLoRA: adapters on 4-bit stacks (quantized first, as the trainer does) train.
TEST(Experts, AdaptersOnFourBitStacksTrain) {
  model::CausalLM m = load_model(fixture("qwen3_moe"));
  for (auto& [name, part] : m->parts())
    if (name.rfind("model.layers.", 0) == 0)
      model::quantize_linears(*part, "nf4", 64, true, torch::kFloat);
  model::apply_lora(m, model::LoraConfig{}, 0);
  auto& experts = *m->model->layers->ptr<model::DecoderLayerImpl>(0)->moe->experts;
  ASSERT_TRUE(experts.is_quantized() && experts.gate_up_lora);
  EXPECT_EQ(experts.gate_up_lora->lora_B->weight.size(0), experts.shape_of("gate_up_proj")[1]);
  auto ids = torch::randint(3, 300, {2, 9});
  auto pos = torch::arange(9).unsqueeze(0).expand({2, 9}).contiguous();
  m->forward(ids, pos).sum().backward();
  EXPECT_GT(experts.gate_up_lora->lora_B->weight.grad().abs().sum().item<double>(), 0.0);
}

// gate and up (Mixtral's w1 and w3) name the fused stack at twice the rank and alpha; down (w2)
// its own stack; gate without up is refused.
TEST(Lora, ExpertNamesMapOntoTheStacksAsPeftMapsThem) {
  model::CausalLM m = load_model(fixture("mixtral"));
  model::LoraConfig cfg;
  cfg.r = 4;
  cfg.alpha = 8;
  cfg.target_modules = {"q_proj", "w1", "w3", "w2"};
  const auto resolved = model::resolved_for(cfg, m->config());
  EXPECT_EQ(resolved.target_modules, std::vector<std::string>{"q_proj"});
  ASSERT_TRUE(resolved.target_parameters);
  EXPECT_EQ(*resolved.target_parameters,
            (std::vector<std::string>{"mlp.experts.down_proj", "mlp.experts.gate_up_proj"}));
  EXPECT_EQ(resolved.rank_of("model.layers.0.mlp.experts.gate_up_proj"), 8);
  EXPECT_DOUBLE_EQ(resolved.scaling_of("gate_up_proj"), 2.0);
  EXPECT_EQ(resolved.rank_of("down_proj"), 4);

  model::apply_lora(m, cfg, 0);
  auto& experts = *m->model->layers->ptr<model::DecoderLayerImpl>(0)->moe->experts;
  ASSERT_TRUE(experts.gate_up_lora && experts.down_lora);
  EXPECT_EQ(experts.gate_up_lora->lora_A->weight.size(0), 8 * m->config().num_experts);
  EXPECT_EQ(experts.down_lora->lora_A->weight.size(0), 4 * m->config().num_experts);
  EXPECT_EQ(model::peft_tensor_name(m, "model.layers.0.mlp.experts.gate_up_lora.lora_A.weight"),
            "model.layers.0.mlp.experts.base_layer.lora_A.weight");
  EXPECT_EQ(model::peft_tensor_name(m, "model.layers.0.mlp.experts.down_lora.lora_B.weight"),
            "model.layers.0.mlp.experts.lora_B.weight");
  // The router is never adapted.
  for (const auto& p : m->named_parameters())
    if (p.key().find(".mlp.gate.") != std::string::npos) {
      EXPECT_FALSE(p.value().requires_grad()) << p.key();
    }

  model::CausalLM again = load_model(fixture("mixtral"));
  model::LoraConfig half = cfg;
  half.target_modules = {"w1", "w2"};
  try {
    model::apply_lora(again, half, 0);
    FAIL() << "gate without up must be refused";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("target both or neither"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kubetune::testing
