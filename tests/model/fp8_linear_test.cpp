// model.precision fp8's linear layers (trainer/model/fp8_linear.h): the grouped frozen layers
// equal the plain layers computing the same FP8 products; FP8 stays within E4M3's rounding of the
// exact products; a trainable weight's gradient is the exact dY^T X. On the CPU (FP8 emulated by
// kernels/fp8's reference), and on a Hopper GPU under bf16 autocast where one is present.
#include "trainer/model/fp8_linear.h"

#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "kernels/swiglu.h"
#include "trainer/model/frozen_linear_group.h"
#include "trainer/model/layers.h"
#include "trainer/model/lora.h"

namespace kubetune::model {
namespace {

constexpr int64_t kHidden = 64, kInter = 128, kKv = 16;

// A frozen layer with a non-zero LoRA adapter, the same on every call with the same seed.
Linear make_linear(int64_t in, int64_t out, bool lora, uint64_t seed, bool qlora = false) {
  torch::manual_seed(seed);
  Linear l(in, out, /*bias=*/false, torch::TensorOptions());
  torch::NoGradGuard no_grad;
  l->weight.normal_(0, 0.2);
  l->weight.set_requires_grad(false);
  if (lora)
    l->add_lora((torch::randn({8, in}) * 0.2).requires_grad_(true),
                (torch::randn({out, 8}) * 0.2).requires_grad_(true), 2.0, 0.0);
  if (qlora) l->quantize_4bit("nf4", 64, true, torch::kFloat32);
  return l;
}

std::vector<Linear> attention_layers(bool fp8, bool qlora = false) {
  std::vector<Linear> out{make_linear(kHidden, kHidden, true, 1, qlora),
                          make_linear(kHidden, kKv, true, 2, qlora),
                          make_linear(kHidden, kKv, false, 3, qlora)};
  if (fp8) {
    for (auto& l : out) EXPECT_TRUE(l->use_fp8());
  }
  return out;
}

// gate, up and down, or (fused) Phi-3's gate_up and down.
std::vector<Linear> mlp_layers(bool fp8, bool fused = false) {
  std::vector<Linear> out;
  if (fused) {
    out.push_back(make_linear(kHidden, 2 * kInter, true, 4));
  } else {
    out.push_back(make_linear(kHidden, kInter, true, 4));
    out.push_back(make_linear(kHidden, kInter, true, 5));
  }
  out.push_back(make_linear(kInter, kHidden, true, 6));
  if (fp8) {
    for (auto& l : out) EXPECT_TRUE(l->use_fp8());
  }
  return out;
}

std::vector<LinearImpl*> pointers(std::vector<Linear>& layers) {
  std::vector<LinearImpl*> out;
  for (auto& l : layers) out.push_back(l.get());
  return out;
}

// Outputs, the input's gradient and every adapter's gradients, in fp32 on the CPU, of the
// layers run grouped or one by one (LinearImpl::forward; on a GPU that is the group too).
// chunk_rows: the grouped MLP's tokens per chunk (0: all at once).
std::vector<torch::Tensor> run(std::vector<Linear>& layers, bool mlp, bool grouped,
                               const torch::Tensor& x0, bool autocast, int64_t chunk_rows = 0) {
  auto ptrs = pointers(layers);
  for (auto* l : ptrs)
    if (l->has_lora()) l->lora_A().mutable_grad() = l->lora_B().mutable_grad() = torch::Tensor();
  auto x = x0.detach().clone().requires_grad_(true);
  const auto device = x.device().type();
  at::autocast::set_autocast_enabled(device, autocast);
  at::autocast::set_autocast_dtype(device, torch::kBFloat16);
  std::vector<torch::Tensor> outs;
  if (mlp && grouped) {
    outs = {frozen_gated_mlp(x, ptrs, kernels::GateActivation::kSilu, chunk_rows)};
  } else if (mlp && ptrs.size() == 2) {
    outs = {ptrs[1]->forward(
        kernels::gated_activation_packed(ptrs[0]->forward(x), kernels::GateActivation::kSilu))};
  } else if (mlp) {
    outs = {ptrs[2]->forward(kernels::swiglu(ptrs[0]->forward(x), ptrs[1]->forward(x)))};
  } else if (grouped) {
    outs = frozen_linear_group(x, ptrs);
  } else {
    for (auto* l : ptrs) outs.push_back(l->forward(x));
  }
  at::autocast::set_autocast_enabled(device, false);
  torch::manual_seed(7);
  torch::Tensor total = torch::zeros({}, x.options().dtype(torch::kFloat32));
  for (auto& o : outs)
    total = total + (o.to(torch::kFloat32) * torch::randn(o.sizes()).to(o.device())).sum();
  total.backward();
  std::vector<torch::Tensor> values;
  for (auto& o : outs) values.push_back(o.detach().to(torch::kFloat32).cpu());
  values.push_back(x.grad().to(torch::kFloat32).cpu());
  for (auto* l : ptrs)
    if (l->has_lora()) {
      values.push_back(l->lora_A().grad().to(torch::kFloat32).cpu());
      values.push_back(l->lora_B().grad().to(torch::kFloat32).cpu());
    }
  return values;
}

// Largest difference relative to the reference's largest magnitude, per tensor.
void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& ref,
                  double tol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double scale = ref[i].abs().max().item<double>() + 1e-12;
    EXPECT_LE((got[i] - ref[i]).abs().max().item<double>() / scale, tol)
        << what << ": tensor " << i;
  }
}

torch::Tensor input() {
  torch::manual_seed(0);
  return torch::randn({2, 5, kHidden});
}

TEST(Fp8Linear, FrozenBaseIsKeptInFp8) {
  Linear l = make_linear(kHidden, kKv, true, 1);
  ASSERT_TRUE(l->use_fp8());
  EXPECT_TRUE(l->uses_fp8());
  EXPECT_EQ(l->weight.numel(), 0);  // the bf16 copy is gone
  EXPECT_EQ(l->out_features(), kKv);
  EXPECT_EQ(l->in_features(), kHidden);
  EXPECT_EQ(l->fp8_base().values.scalar_type(), torch::kFloat8_e4m3fn);
  Linear odd = make_linear(kHidden, 10, false, 1);  // cuBLASLt's FP8 GEMM needs multiples of 16
  EXPECT_FALSE(odd->use_fp8());
  EXPECT_FALSE(odd->uses_fp8());
  EXPECT_EQ(odd->weight.numel(), kHidden * 10);
}

// The group against the plain layers: the same FP8 products for the outputs and the adapters'
// gradients; the input's gradient (after the `outputs` outputs) within E4M3's rounding, since the
// group quantizes its layers' output gradients as one matrix (fp8_group_input_gradient: one scale
// per token across them, where each plain layer takes its own).
void expect_group_close(const std::vector<torch::Tensor>& got,
                        const std::vector<torch::Tensor>& ref, size_t outputs,
                        const std::string& what, double input_gradient_tol = 0.08) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double scale = ref[i].abs().max().item<double>() + 1e-12;
    EXPECT_LE((got[i] - ref[i]).abs().max().item<double>() / scale,
              i == outputs ? input_gradient_tol : 1e-5)
        << what << ": tensor " << i;
  }
}

TEST(Fp8Linear, CpuGroupEqualsPlainLayers) {
  auto attn = attention_layers(true);
  expect_group_close(run(attn, false, true, input(), false),
                     run(attn, false, false, input(), false), 3, "q/k/v");
  auto mlp = mlp_layers(true);
  expect_group_close(run(mlp, true, true, input(), false), run(mlp, true, false, input(), false), 1,
                     "SwiGLU MLP");
  // Over chunks of tokens (long sequences): the input is quantized per token, chunk by chunk.
  expect_group_close(run(mlp, true, true, input(), false, /*chunk_rows=*/4),
                     run(mlp, true, false, input(), false), 1, "SwiGLU MLP in chunks");
  // Phi-3's fused gate_up: SwiGLU's FP8 kernel reads the product's halves in place. Grouped and
  // plain quantize the same [tokens, 2 x intermediate] gradient, so the input's gradient agrees
  // to far less than E4M3's rounding.
  auto fused = mlp_layers(true, /*fused=*/true);
  expect_group_close(run(fused, true, true, input(), false),
                     run(fused, true, false, input(), false), 1, "SwiGLU MLP, fused gate_up", 1e-3);
  expect_group_close(run(fused, true, true, input(), false, /*chunk_rows=*/4),
                     run(fused, true, false, input(), false), 1,
                     "SwiGLU MLP, fused gate_up, in chunks", 1e-3);
  auto q4 = attention_layers(true, /*qlora=*/true);
  expect_group_close(run(q4, false, true, input(), false), run(q4, false, false, input(), false), 3,
                     "q/k/v on 4-bit weights");
}

// q/k/v-shaped frozen layers with FP8 bases on `device` (4-bit ones when `qlora`), quantized there.
std::vector<Linear> fp8_attention_layers_on(const torch::Device& device, bool qlora) {
  std::vector<Linear> out{make_linear(kHidden, kHidden, true, 1),
                          make_linear(kHidden, kKv, true, 2), make_linear(kHidden, kKv, false, 3)};
  for (auto& l : out) {
    l->to(device);
    if (qlora) l->quantize_4bit("nf4", 64, true, torch::kBFloat16);
    EXPECT_TRUE(l->use_fp8());
  }
  return out;
}

TEST(Fp8Linear, GroupInputGradientIsOneProductOfTheLayersSideBySide) {
  // fp8_group_input_gradient assembles [W_1; W_2; ...]^T from each layer's FP8 base (kept, or
  // converted from 4 bits) and their row scales; it must equal the one product written out, on
  // the CPU and on a Hopper GPU where there is one.
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available() && kernels::fp8_supported_on(torch::Device(torch::kCUDA, 0)))
    devices.emplace_back(torch::kCUDA);
  for (const auto& device : devices)
    for (auto [qlora, kept] :
         {std::pair{false, false}, {false, true}, {true, false}, {true, true}}) {
      auto layers = fp8_attention_layers_on(device, qlora);
      if (kept) {
        // The bases kept transposed side by side (LoRA's; a 4-bit base is never kept).
        keep_fp8_transposed({layers[0].get(), layers[1].get(), layers[2].get()});
        for (auto& l : layers) EXPECT_EQ(l->fp8_transposed_group() != nullptr, !qlora) << device;
      }
      const auto dtype = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
      std::vector<const LinearImpl*> ptrs;
      std::vector<torch::Tensor> dys, values, scales;
      torch::manual_seed(8);
      for (auto& l : layers) {
        ptrs.push_back(l.get());
        dys.push_back(torch::randn({6, l->out_features()}).to(device, dtype));
        values.push_back(l->fp8_base().values);
        scales.push_back(l->fp8_base().scales);
      }
      const kernels::Fp8Transposed stacked{kernels::transpose_fp8(torch::cat(values, 0)),
                                           torch::cat(scales, 0)};
      if (kept && !qlora) {  // what is kept is that product's operand
        EXPECT_TRUE(torch::equal(layers[0]->fp8_transposed_group()->values, stacked.values));
        EXPECT_TRUE(torch::equal(layers[0]->fp8_transposed_group()->row_scales,
                                 stacked.row_scales.view(-1)));
      }
      const auto want = fp8_input_gradient(torch::cat(dys, 1), stacked, dtype);
      const auto got = fp8_group_input_gradient(fp8_group_output_gradients(dys, ptrs), ptrs, dtype);
      EXPECT_TRUE(torch::equal(got, want))
          << device << ", 4-bit bases " << qlora << ", kept " << kept;
      // Each layer alone (a group whose other members have no gradient) reads its own columns.
      for (auto& l : layers)
        EXPECT_TRUE(torch::equal(l->fp8_base_transposed().values,
                                 kernels::transpose_fp8(l->fp8_base().values)))
            << device << ", 4-bit bases " << qlora << ", kept " << kept;
      // And it is dY W within E4M3's rounding (and the bf16 output's, on the GPU).
      torch::Tensor exact = torch::zeros(want.sizes());
      for (size_t i = 0; i < layers.size(); ++i)
        exact += at::mm(dys[i].cpu().to(torch::kFloat32),
                        kernels::dequantize_rows_fp8(layers[i]->fp8_base(), torch::kFloat32).cpu());
      EXPECT_LE((got.cpu().to(torch::kFloat32) - exact).abs().max().item<double>() /
                    exact.abs().max().item<double>(),
                0.08)
          << device << ", 4-bit bases " << qlora << ", kept " << kept;
    }
}

// The kept group serves only the layers it was made of, all of them in its order: a subset or
// another order gets its W^T made as before, the same product as from layers never kept.
TEST(Fp8Linear, KeptGroupServesOnlyItsOwnLayersInOrder) {
  auto kept = fp8_attention_layers_on(torch::kCPU, false);
  auto plain = fp8_attention_layers_on(torch::kCPU, false);
  keep_fp8_transposed({kept[0].get(), kept[1].get(), kept[2].get()});
  for (const std::vector<int>& order : {std::vector<int>{0, 2}, {1, 0, 2}, {2}, {0, 1, 2}}) {
    std::vector<const LinearImpl*> with_kept, without;
    std::vector<torch::Tensor> dys;
    torch::manual_seed(9);
    for (int i : order) {
      with_kept.push_back(kept[i].get());
      without.push_back(plain[i].get());
      dys.push_back(torch::randn({6, kept[i]->out_features()}));
    }
    const auto got = fp8_group_input_gradient(fp8_group_output_gradients(dys, with_kept), with_kept,
                                              torch::kFloat32);
    const auto want = fp8_group_input_gradient(fp8_group_output_gradients(dys, without), without,
                                               torch::kFloat32);
    EXPECT_TRUE(torch::equal(got, want)) << "layers " << order.size() << ", first " << order[0];
  }
}

// Under LoRA dropout q/k/v run one by one: each is kept transposed alone, so its input gradient
// reads its own W^T instead of copying its columns out of a group in every step.
TEST(Fp8Linear, LoraDropoutKeepsEachLayerAlone) {
  // q, k, v's frozen bases; dropout on q's adapter alone already keeps them from running as one.
  std::vector<Linear> layers, plain;
  for (auto [out, seed] : {std::pair<int64_t, uint64_t>{kHidden, 1}, {kKv, 2}, {kKv, 3}}) {
    layers.push_back(make_linear(kHidden, out, false, seed));
    plain.push_back(make_linear(kHidden, out, false, seed));
  }
  layers[0]->add_lora(torch::randn({8, kHidden}), torch::randn({kHidden, 8}), 2.0,
                      /*dropout=*/0.1);
  for (size_t i = 0; i < layers.size(); ++i) {
    ASSERT_TRUE(layers[i]->use_fp8());
    ASSERT_TRUE(plain[i]->use_fp8());
  }
  keep_fp8_transposed({layers[0].get(), layers[1].get(), layers[2].get()});
  for (size_t i = 0; i < layers.size(); ++i) {
    const Fp8TransposedGroup* group = layers[i]->fp8_transposed_group();
    ASSERT_NE(group, nullptr);
    EXPECT_EQ(group->values.size(1), layers[i]->out_features()) << "layer " << i;
    EXPECT_EQ(layers[i]->fp8_transposed_column(), 0);
    if (i > 0) {
      EXPECT_NE(group, layers[i - 1]->fp8_transposed_group());
    }
    torch::manual_seed(4);
    const std::vector<torch::Tensor> dys{torch::randn({6, layers[i]->out_features()})};
    const std::vector<const LinearImpl*> alone{layers[i].get()}, unkept{plain[i].get()};
    EXPECT_TRUE(torch::equal(
        fp8_group_input_gradient(fp8_group_output_gradients(dys, alone), alone, torch::kFloat32),
        fp8_group_input_gradient(fp8_group_output_gradients(dys, unkept), unkept,
                                 torch::kFloat32)));
  }
}

// use_fp8_products keeps each decoder layer's bases transposed by the groups its backward takes
// as one product: were input_gradient_groups() out of step with backward's order, the step would
// quietly transpose again in every step.
TEST(Fp8Linear, DecoderLayerKeepsItsInputGradientGroups) {
  ModelConfig c;
  c.hidden_size = kHidden, c.intermediate_size = kInter, c.num_attention_heads = 4;
  c.num_key_value_heads = 1, c.head_dim = kKv, c.vocab_size = 32, c.num_hidden_layers = 1;
  DecoderLayer layer(c, torch::TensorOptions());
  init_like_hf(*layer, 0.02);
  for (auto& p : layer->parameters()) p.set_requires_grad(false);  // frozen bases, as LoRA's
  EXPECT_EQ(use_fp8_products(*layer), 7);
  auto groups = layer->self_attn->input_gradient_groups();
  for (auto& group : layer->mlp->input_gradient_groups()) groups.push_back(group);
  ASSERT_EQ(groups.size(), 4u);
  for (const auto& group : groups) {
    int64_t column = 0;
    for (const auto* l : group) {
      ASSERT_NE(l->fp8_transposed_group(), nullptr);
      EXPECT_EQ(l->fp8_transposed_group(), group[0]->fp8_transposed_group());
      EXPECT_EQ(l->fp8_transposed_column(), column);
      column += l->out_features();
    }
    EXPECT_EQ(group[0]->fp8_transposed_group()->values.size(1), column);
  }
}

TEST(Fp8Linear, CpuStaysWithinE4m3RoundingOfExactProducts) {
  auto exact = attention_layers(false), fp8 = attention_layers(true);
  // Outputs: two E4M3 roundings (2^-4 relative) per term, independent across the sum; the
  // gradients add dY's rounding.
  expect_close(run(fp8, false, false, input(), false), run(exact, false, false, input(), false),
               0.08, "q/k/v");
  auto mlp_exact = mlp_layers(false), mlp_fp8 = mlp_layers(true);
  expect_close(run(mlp_fp8, true, false, input(), false),
               run(mlp_exact, true, false, input(), false), 0.1, "SwiGLU MLP");
}

TEST(Fp8Linear, TrainableWeightGradientIsExact) {
  torch::manual_seed(3);
  auto w = (torch::randn({kKv, kHidden}) * 0.2).requires_grad_(true);
  auto x = input().requires_grad_(true);
  auto dy = torch::randn({2, 5, kKv});
  (fp8_linear(x, w, torch::kFloat32) * dy).sum().backward();
  auto w_ref = w.detach().clone().requires_grad_(true);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto y_ref = torch::nn::functional::linear(x_ref, w_ref);
  (y_ref * dy).sum().backward();
  // dW = dY^T X stays in the compute dtype (fp32 here): exact.
  EXPECT_TRUE(torch::allclose(w.grad(), w_ref.grad(), 1e-5, 1e-5));
  const double dx_err = (x.grad() - x_ref.grad()).abs().max().item<double>() /
                        x_ref.grad().abs().max().item<double>();
  EXPECT_LE(dx_err, 0.08);
  EXPECT_GT(dx_err, 0.0);  // dY and W did go through FP8
  auto y = fp8_linear(x.detach(), w.detach(), torch::kFloat32);
  EXPECT_LE((y - y_ref).abs().max().item<double>() / y_ref.abs().max().item<double>(), 0.08);
}

TEST(Fp8Linear, MergeLoraDequantizesTheFp8Base) {
  Linear l = make_linear(kHidden, kKv, true, 1);
  ASSERT_TRUE(l->use_fp8());
  keep_fp8_transposed({l.get()});
  ASSERT_NE(l->fp8_transposed_group(), nullptr);
  auto base = kernels::dequantize_rows_fp8(l->fp8_base(), torch::kFloat32);
  auto delta = at::mm(l->lora_B().detach(), l->lora_A().detach()) * l->lora_scaling();
  l->merge_lora();
  EXPECT_FALSE(l->uses_fp8());
  EXPECT_EQ(l->fp8_transposed_group(), nullptr);  // the kept W^T goes with the FP8 base
  EXPECT_TRUE(torch::allclose(l->weight, base + delta, 1e-5, 1e-5));
}

TEST(Fp8Linear, MergeLoraOfA4BitBaseLeavesAPlainLayer) {
  // QLoRA under fp8 keeps its 4-bit base (converted per product); merged, the layer is plain.
  Linear l = make_linear(kHidden, kKv, true, 1, /*qlora=*/true);
  ASSERT_TRUE(l->use_fp8());
  auto base = kernels::dequantize_4bit(l->quantized(), torch::kFloat32);
  auto delta = at::mm(l->lora_B().detach(), l->lora_A().detach()) * l->lora_scaling();
  l->merge_lora();
  EXPECT_FALSE(l->uses_fp8());
  EXPECT_FALSE(l->is_quantized());
  EXPECT_TRUE(torch::allclose(l->weight, base + delta, 1e-5, 1e-5));
  auto x = torch::randn({3, kHidden});
  EXPECT_TRUE(torch::allclose(l->forward(x), at::linear(x, base + delta), 1e-4, 1e-4));
}

TEST(Fp8Linear, FourBitBaseIsItsDequantizedWeightQuantized) {
  // A 4-bit base's FP8 rows come straight from its codes (kernels/fp8_from_4bit.h), for forward
  // and, transposed, for backward: the same bytes and scales as quantizing the dequantized weight,
  // on the CPU and on a Hopper GPU where there is one.
  std::vector<torch::Device> devices{torch::kCPU};
  if (torch::cuda::is_available() && kernels::fp8_supported_on(torch::Device(torch::kCUDA, 0)))
    devices.emplace_back(torch::kCUDA);
  for (const auto& device : devices) {
    Linear l = make_linear(kInter, kHidden, true, 1);
    l->to(device);
    l->quantize_4bit("nf4", 64, true, torch::kBFloat16);
    ASSERT_TRUE(l->use_fp8());
    const auto expected =
        kernels::quantize_rows_fp8(kernels::dequantize_4bit(l->quantized(), torch::kBFloat16));
    const auto bytes = [](const torch::Tensor& t) { return t.cpu().view(torch::kUInt8); };
    const auto base = l->fp8_base();
    EXPECT_TRUE(torch::equal(bytes(base.values), bytes(expected.values))) << device;
    EXPECT_TRUE(torch::equal(base.scales.cpu(), expected.scales.cpu())) << device;
    const auto t = l->fp8_base_transposed();
    EXPECT_TRUE(torch::equal(bytes(t.values), bytes(kernels::transpose_fp8(expected.values))));
    EXPECT_TRUE(torch::equal(t.row_scales.cpu(), expected.scales.cpu())) << device;
  }
}

TEST(Fp8Linear, CudaUnderAutocastMatchesCpuEmulation) {
  if (!torch::cuda::is_available() || !kernels::fp8_supported_on(torch::Device(torch::kCUDA, 0)))
    GTEST_SKIP() << "no CUDA device of compute capability 9.0+ on this machine";
  for (const std::string what : {"q/k/v", "MLP", "MLP with a fused gate_up"}) {
    const bool mlp = what != "q/k/v", fused = what == "MLP with a fused gate_up";
    auto cpu = mlp ? mlp_layers(true, fused) : attention_layers(true);
    auto ref = run(cpu, mlp, false, input(), false);
    // Quantized on the GPU (the FP8 form is not a registered tensor that to() would move).
    auto gpu = mlp ? mlp_layers(false, fused) : attention_layers(false);
    for (auto& l : gpu) {
      l->to(torch::kCUDA);
      ASSERT_TRUE(l->use_fp8());
    }
    // bf16 activations around the FP8 products: bf16's rounding on top of the same FP8 values.
    expect_close(run(gpu, mlp, true, input().cuda(), true), ref, 0.05, what);
  }
}

}  // namespace
}  // namespace kubetune::model
