// The grouped frozen layers (trainer/model/frozen_linear_group.h) against PEFT's LoRA formula
// written out in LibTorch ops: outputs and the gradients of the input and of both adapter
// factors. On the CPU in fp32 here (the group is forced on; the model uses it on CUDA only), and
// on CUDA in fp32 and under bf16 autocast where a GPU is present.
#include "trainer/model/frozen_linear_group.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <optional>
#include <string>

#include "kernels/quant4.h"
#include "kernels/swiglu.h"

namespace kubetune::model {
namespace {

// A frozen layer with an adapter whose B is not zero (PEFT starts it at zero; a trained one is
// not).
Linear make_linear(int64_t in, int64_t out, bool lora, torch::Device device) {
  Linear l(in, out, /*bias=*/false, torch::TensorOptions().device(device));
  torch::NoGradGuard no_grad;
  l->weight.normal_(0, 0.2);
  l->weight.set_requires_grad(false);
  if (lora)
    l->add_lora((torch::randn({8, in}) * 0.2).to(device).requires_grad_(true),
                (torch::randn({out, 8}) * 0.2).to(device).requires_grad_(true), 2.0, 0.0);
  return l;
}

// PEFT: x W^T + scaling * (x A^T) B^T; a 4-bit W is used dequantized, as bitsandbytes does.
torch::Tensor peft_formula(const torch::Tensor& x, LinearImpl& l) {
  auto w = l.is_quantized() ? kernels::dequantize_4bit(l.quantized(), torch::kFloat32) : l.weight;
  auto y = torch::nn::functional::linear(x, w);
  if (!l.has_lora()) return y;
  return y +
         torch::nn::functional::linear(torch::nn::functional::linear(x, l.lora_A()), l.lora_B()) *
             l.lora_scaling();
}

struct Grads {
  std::vector<torch::Tensor> values;  // outputs, then d x, then d A and d B of each adapter
};

// input_grad = false: the input needs no gradient (the first layer over frozen embeddings), so
// backward makes only the adapters' gradients.
// chunk_rows: the grouped MLP's tokens per chunk (0: all at once). output_read = false: the
// forward runs under MlpOutputNotRead (a checkpointed layer's recompute) and only the gradients
// are returned.
Grads run(bool grouped, bool mlp, std::vector<Linear>& layers, const torch::Tensor& x0,
          const std::vector<torch::Tensor>& dys, bool autocast, bool input_grad = true,
          int64_t chunk_rows = 0, bool output_read = true,
          kernels::GateActivation act = kernels::GateActivation::kSilu) {
  for (auto& l : layers)
    if (l->has_lora()) {
      l->lora_A().mutable_grad() = torch::Tensor();
      l->lora_B().mutable_grad() = torch::Tensor();
    }
  auto x = x0.detach().clone().requires_grad_(input_grad);
  std::vector<LinearImpl*> ptrs;
  for (auto& l : layers) ptrs.push_back(l.get());
  const auto device = x.device().type();
  at::autocast::set_autocast_enabled(device, autocast);
  at::autocast::set_autocast_dtype(device, torch::kBFloat16);
  std::vector<torch::Tensor> outs;
  std::optional<MlpOutputNotRead> not_read;
  if (!output_read) not_read.emplace();
  if (mlp) {
    if (grouped) {
      EXPECT_TRUE(can_group(x, ptrs, /*require_cuda=*/false));
      outs = {frozen_gated_mlp(x, ptrs, act, chunk_rows)};
    } else if (ptrs.size() == 2) {  // a fused gate_up_proj (Phi-3): gate's rows first
      const auto gate_up = peft_formula(x, *ptrs[0]);
      const int64_t i = gate_up.size(-1) / 2;
      outs = {peft_formula(
          kernels::gated_reference(gate_up.narrow(-1, 0, i), gate_up.narrow(-1, i, i), act),
          *ptrs[1])};
    } else {
      auto gate = peft_formula(x, *ptrs[0]), up = peft_formula(x, *ptrs[1]);
      outs = {peft_formula(kernels::gated_reference(gate, up, act), *ptrs[2])};
    }
  } else {
    if (grouped) {
      EXPECT_TRUE(can_group(x, ptrs, /*require_cuda=*/false));
      outs = frozen_linear_group(x, ptrs);
    } else {
      for (auto* l : ptrs) outs.push_back(peft_formula(x, *l));
    }
  }
  not_read.reset();
  at::autocast::set_autocast_enabled(device, false);
  at::autocast::clear_cache();
  torch::Tensor total = torch::zeros({}, x.options().dtype(torch::kFloat32));
  for (size_t i = 0; i < outs.size(); ++i)
    total = total + (outs[i].to(torch::kFloat32) * dys[i]).sum();
  total.backward();
  Grads g;
  if (output_read)
    for (auto& o : outs) g.values.push_back(o.detach().to(torch::kFloat32).cpu());
  if (input_grad) g.values.push_back(x.grad().to(torch::kFloat32).cpu());
  for (auto& l : layers)
    if (l->has_lora()) {
      g.values.push_back(l->lora_A().grad().cpu());
      g.values.push_back(l->lora_B().grad().cpu());
    }
  return g;
}

// Largest difference relative to the reference's largest magnitude, per tensor.
void expect_close(const Grads& a, const Grads& b, double tol, const std::string& what) {
  ASSERT_EQ(a.values.size(), b.values.size()) << what;
  for (size_t i = 0; i < a.values.size(); ++i) {
    const double scale = b.values[i].abs().max().item<double>() + 1e-12;
    const double diff = (a.values[i] - b.values[i]).abs().max().item<double>();
    EXPECT_LE(diff / scale, tol) << what << ": tensor " << i;
  }
}

// QLoRA: every base weight in bitsandbytes' NF4 with double quantization, computed in the
// products' dtype.
void quantize(std::vector<Linear>& layers, bool autocast) {
  for (auto& l : layers)
    l->quantize_4bit("nf4", 64, true, autocast ? torch::kBFloat16 : torch::kFloat32);
}

void check(torch::Device device, bool autocast, double tol, bool qlora = false) {
  torch::manual_seed(0);
  const int64_t H = 64, I = 128, kv = 16;
  auto x = torch::randn({2, 5, H}).to(device);
  // q/k/v shapes, one of them without an adapter (a target list that leaves v_proj out).
  std::vector<Linear> qkv{make_linear(H, H, true, device), make_linear(H, kv, true, device),
                          make_linear(H, kv, false, device)};
  std::vector<torch::Tensor> dys{torch::randn({2, 5, H}).to(device),
                                 torch::randn({2, 5, kv}).to(device),
                                 torch::randn({2, 5, kv}).to(device)};
  if (qlora) quantize(qkv, autocast);
  expect_close(run(true, false, qkv, x, dys, autocast), run(false, false, qkv, x, dys, autocast),
               tol, "q/k/v group");
  expect_close(run(true, false, qkv, x, dys, autocast, /*input_grad=*/false),
               run(false, false, qkv, x, dys, autocast, false), tol,
               "q/k/v group, no input gradient");
  // The MLP with SwiGLU (Llama) and GeGLU (Gemma) between, with separate gate and up layers and
  // with one fused gate_up_proj (Phi-3).
  const std::vector<torch::Tensor> dy{torch::randn({2, 5, H}).to(device)};
  for (const auto act : {kernels::GateActivation::kSilu, kernels::GateActivation::kGeluTanh})
    for (const bool fused : {false, true}) {
      const std::string name =
          std::string(act == kernels::GateActivation::kSilu ? "SwiGLU MLP" : "GeGLU MLP") +
          (fused ? " (fused gate_up)" : "");
      auto mlp_run = [&](bool grouped, std::vector<Linear>& layers, bool input_grad = true,
                         int64_t chunk_rows = 0, bool output_read = true) {
        return run(grouped, true, layers, x, dy, autocast, input_grad, chunk_rows, output_read,
                   act);
      };
      // Gate and up (or gate_up), then down with or without an adapter (a target list that
      // leaves it out).
      auto layers = [&](bool down_adapted) {
        std::vector<Linear> out;
        if (fused) {
          out.push_back(make_linear(H, 2 * I, true, device));
        } else {
          out.push_back(make_linear(H, I, true, device));
          out.push_back(make_linear(H, I, true, device));
        }
        out.push_back(make_linear(I, H, down_adapted, device));
        if (qlora) quantize(out, autocast);
        return out;
      };
      std::vector<Linear> mlp = layers(true);
      const Grads reference = mlp_run(false, mlp);
      expect_close(mlp_run(true, mlp), reference, tol, name);
      // Long sequences run over chunks of tokens (10 tokens here: chunks of 3, 3, 3 and 1).
      expect_close(mlp_run(true, mlp, true, /*chunk_rows=*/3), reference, tol, name + " in chunks");
      expect_close(mlp_run(true, mlp, /*input_grad=*/false, 3), mlp_run(false, mlp, false), tol,
                   name + " in chunks, no input gradient");
      // In a checkpointed layer's recompute the output is not read: the same gradients, whole and
      // in chunks.
      const Grads grads_only = mlp_run(false, mlp, true, 0, /*output_read=*/false);
      expect_close(mlp_run(true, mlp, true, 0, false), grads_only, tol, name + ", output not read");
      expect_close(mlp_run(true, mlp, true, 3, false), grads_only, tol,
                   name + " in chunks, output not read");
      std::vector<Linear> mlp_no_down = layers(false);
      expect_close(mlp_run(true, mlp_no_down, true, 4), mlp_run(false, mlp_no_down), tol,
                   name + " in chunks, down without an adapter");
    }
}

TEST(FrozenLinearGroup, MlpChunksOnlyLongSequences) {
  // Llama-3.1-8B's width: chunks of 512 MiB of bf16 [tokens, 14336] (18,688 tokens, a multiple of
  // 256), and none up to twice that.
  EXPECT_EQ(swiglu_mlp_chunk_rows(4096, 14336), 0);
  EXPECT_EQ(swiglu_mlp_chunk_rows(2 * 18688, 14336), 0);
  EXPECT_EQ(swiglu_mlp_chunk_rows(342733, 14336), 18688);
  EXPECT_EQ(swiglu_mlp_chunk_rows(1 << 20, 8192), 32768);
}

TEST(FrozenLinearGroup, EqualsPeftFormulaOnCpu) { check(torch::kCPU, false, 1e-5); }

TEST(FrozenLinearGroup, EqualsPeftFormulaOn4BitWeightsOnCpu) {
  check(torch::kCPU, false, 1e-5, /*qlora=*/true);
}

TEST(FrozenLinearGroup, RefusesDropoutQuantizedAndTrainableWeights) {
  auto x = torch::randn({2, 3, 16});
  Linear frozen = make_linear(16, 8, true, torch::kCPU);
  EXPECT_TRUE(can_group(x, {frozen.get()}, false));
  EXPECT_FALSE(can_group(x, {frozen.get()}));  // the model uses it on CUDA only
  Linear trainable(16, 8, false, torch::TensorOptions());
  EXPECT_FALSE(can_group(x, {frozen.get(), trainable.get()}, false));
  Linear dropout(16, 8, false, torch::TensorOptions());
  dropout->weight.set_requires_grad(false);
  dropout->add_lora(torch::zeros({4, 16}), torch::zeros({8, 4}), 1.0, 0.1);
  EXPECT_FALSE(can_group(x, {dropout.get()}, false));
}

TEST(FrozenLinearGroup, CudaEqualsPeftFormulaInFp32AndUnderAutocast) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device on this machine";
  check(torch::kCUDA, false, 1e-4);  // TF32 is off by default in LibTorch's matmuls
  check(torch::kCUDA, true, 0.03);   // bf16 products, summed in a different order than autograd
  check(torch::kCUDA, false, 1e-4, /*qlora=*/true);
  check(torch::kCUDA, true, 0.03, /*qlora=*/true);
}

}  // namespace
}  // namespace kubetune::model
