// Parity with transformers/peft: logits, loss and gradients of every family, packed sequences,
// gradient checkpointing, LoRA, PEFT adapters in both directions, merged HF folders.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>

#include "test_util.h"
#include "trainer/io/peft_adapter.h"
#include "trainer/model/checkpoint_names.h"

namespace kubetune::testing {
namespace {

using model::CausalLM;

constexpr double kTol = 1e-4;

struct Ref {
  explicit Ref(const std::string& name) : file(fixture(name + "_ref.safetensors")) {}
  at::Tensor operator[](const std::string& n) const { return file.tensor(n); }
  io::SafetensorsFile file;
};

// Mean next-token loss as HF computes it, then backward; checks loss and every gradient. The model
// must already be on `device`; labels stay on the host, as in training.
void check_loss_and_grads(CausalLM& m, const Ref& ref, const std::string& what,
                          const torch::Device& device = torch::kCPU) {
  m->train();
  m->zero_grad();
  at::Tensor hidden = m->hidden_states(ref["input_ids"].to(device), ref["position_ids"].to(device));
  // chunk_rows=5 forces several chunks through the fused loss.
  auto [loss_sum, n] = model::next_token_loss_sum(*m, hidden, ref["labels"], 5);
  at::Tensor mean = loss_sum / static_cast<double>(n);
  // transformers adds the router's load-balancing loss where the config asks for it.
  if (at::Tensor router = m->router_loss(1.0); router.defined()) mean = mean + router;
  EXPECT_NEAR(mean.item<double>(), ref["loss"].item<double>(),
              kTol * std::max(1.0, ref["loss"].item<double>()))
      << what;
  mean.backward();
  int checked = 0;
  for (const auto& p : m->named_parameters()) {
    const std::string key = "grad." + p.key();
    if (!p.value().requires_grad()) {
      EXPECT_FALSE(ref.file.contains(key)) << what << ": " << p.key() << " should be trainable";
      continue;
    }
    ASSERT_TRUE(ref.file.contains(key)) << what << ": no reference gradient for " << p.key();
    ASSERT_TRUE(p.value().grad().defined()) << what << ": no gradient for " << p.key();
    // gpt-oss's expert stacks are [E, in, out] in transformers, [E, out, in] here.
    const auto stored = model::stored_slices(m->config(), p.key());
    const bool transposed = stored.size() == 1 && stored[0].transposed;
    const at::Tensor expected = transposed ? ref[key].transpose(-2, -1) : ref[key];
    EXPECT_LT(rel_err(p.value().grad(), expected), kTol) << what << ": " << p.key();
    ++checked;
  }
  int expected = 0;
  for (const auto& name : ref.file.names()) expected += name.rfind("grad.", 0) == 0;
  EXPECT_EQ(checked, expected) << what;
}

class FamilyParity : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_P(FamilyParity, Logits) {
  CausalLM m = load_model(fixture(GetParam()));
  Ref ref(GetParam());
  m->eval();
  torch::NoGradGuard no_grad;
  at::Tensor logits = m->forward(ref["input_ids"], ref["position_ids"]);
  EXPECT_LT(rel_err(logits, ref["logits"]), kTol);
}

TEST_P(FamilyParity, ParameterCountMatchesConfig) {
  CausalLM m = load_model(fixture(GetParam()));
  int64_t n = 0;
  for (const auto& p : m->parameters()) n += p.numel();
  EXPECT_EQ(n, m->config().num_parameters());
}

TEST_P(FamilyParity, LossAndGradients) {
  CausalLM m = load_model(fixture(GetParam()));
  check_loss_and_grads(m, Ref(GetParam()), "full fine-tune");
}

TEST_P(FamilyParity, GradientCheckpointingGivesTheSameGradients) {
  CausalLM m = load_model(fixture(GetParam()));
  m->set_recompute_layers(true);
  check_loss_and_grads(m, Ref(GetParam()), "checkpointed");
}

// Two examples packed in one row must each see exactly what transformers sees when run alone.
TEST_P(FamilyParity, PackedSegmentsMatchSeparateRuns) {
  CausalLM m = load_model(fixture(GetParam()));
  Ref ref(GetParam());
  m->eval();
  torch::NoGradGuard no_grad;
  at::Tensor logits =
      m->forward(ref["packed_input_ids"], ref["packed_position_ids"], ref["packed_segment_ids"])[0];
  at::Tensor first = ref["packed_logits_0"], second = ref["packed_logits_1"];
  EXPECT_LT(rel_err(logits.narrow(0, 0, first.size(0)), first), kTol);
  EXPECT_LT(rel_err(logits.narrow(0, first.size(0), second.size(0)), second), kTol);
  EXPECT_TRUE(logits.isfinite().all().item<bool>()) << "padding rows must not produce NaN";
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyParity,
                         ::testing::Values("llama32", "llama2", "llama_bias", "llama_dynamic",
                                           "qwen2", "mistral", "smollm", "llama_bf16", "qwen3",
                                           "gemma3", "phi3", "phi4", "qwen3_moe", "mixtral",
                                           "gpt_oss", "gemma3_mm"));

// OpenAI's gpt-oss checkpoints store the experts in MXFP4: read made whole, they give the logits
// of the model whose experts are what transformers' convert_moe_packed_tensors makes of them.
TEST(GptOss, Mxfp4ExpertsReadAsTransformersDequantizesThem) {
  CausalLM m = load_model(fixture("gpt_oss_mxfp4"));
  EXPECT_FALSE(m->config().bnb_4bit);
  Ref ref("gpt_oss_mxfp4");
  m->eval();
  torch::NoGradGuard no_grad;
  EXPECT_LT(rel_err(m->forward(ref["input_ids"], ref["position_ids"]), ref["logits"]), kTol);
  // A merged or full output is whole: no quantization_config is written back.
  const std::string dir = output_dir("gpt_oss_from_mxfp4");
  io::save_hf_model(m, dir, at::kBFloat16);
  EXPECT_FALSE(model::ModelConfig::from_dir(dir).raw.contains("quantization_config"));
}

class LoraParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraParity, PeftAdapterLogitsLossAndGradients) {
  CausalLM m = load_model(fixture(GetParam()));
  model::LoraConfig cfg = io::load_peft_adapter(m, fixture(GetParam() + "_lora"));
  EXPECT_EQ(cfg.r, 4);
  EXPECT_DOUBLE_EQ(cfg.alpha, 8);
  int64_t n_lora = 0;
  for (const auto& p : m->named_parameters()) n_lora += p.key().find(".lora_") != std::string::npos;
  // A and B of each adapted layer: every linear layer (7, or Phi-3's 4 fused ones); in a mixture
  // of experts the 4 attention projections and both expert stacks of each sparse layer, and for
  // Qwen3-MoE, whose adapter PEFT converted from per-expert names, not the dense layer's MLP.
  const int64_t layers = m->config().num_hidden_layers;
  const std::map<std::string, int64_t> adapted = {{"phi3", 4 * layers},
                                                  {"qwen3_moe", 6 + 4 + 6},
                                                  {"mixtral", 6 * layers},
                                                  {"gpt_oss", 6 * layers}};
  const auto it = adapted.find(GetParam());
  EXPECT_EQ(n_lora, 2 * (it == adapted.end() ? 7 * layers : it->second));
  Ref ref(GetParam() + "_lora");
  {
    torch::NoGradGuard no_grad;
    m->eval();
    EXPECT_LT(rel_err(m->forward(ref["input_ids"], ref["position_ids"]), ref["logits"]), kTol);
  }
  check_loss_and_grads(m, ref, "LoRA");
  m->set_recompute_layers(true);
  check_loss_and_grads(m, ref, "LoRA checkpointed");
}

TEST(Lora, SeededInitIsDeterministicAndStartsAsTheBaseModel) {
  torch::manual_seed(0);
  CausalLM a = load_model(fixture("llama2")), b = load_model(fixture("llama2"));
  Ref ref("llama2");
  torch::NoGradGuard no_grad;
  at::Tensor base = a->forward(ref["input_ids"], ref["position_ids"]);
  model::LoraConfig cfg;
  cfg.r = 8;
  model::apply_lora(a, cfg, 42);
  model::apply_lora(b, cfg, 42);
  auto pa = a->named_parameters(), pb = b->named_parameters();
  int lora = 0;
  for (const auto& p : pa) {
    bool is_lora = p.key().find(".lora_") != std::string::npos;
    EXPECT_EQ(p.value().requires_grad(), is_lora) << p.key();
    if (!is_lora) continue;
    ++lora;
    EXPECT_TRUE(p.value().equal(pb[p.key()])) << p.key();
    if (p.key().find("lora_B") != std::string::npos) {
      EXPECT_EQ(p.value().abs().max().item<float>(), 0);
    }
    if (p.key().find("lora_A") != std::string::npos) {
      // kaiming_uniform(a=sqrt(5)) bound is 1/sqrt(fan_in).
      double bound = 1.0 / std::sqrt(static_cast<double>(p.value().size(1)));
      EXPECT_LE(p.value().abs().max().item<double>(), bound);
      EXPECT_GT(p.value().abs().max().item<double>(), 0.5 * bound);
    }
  }
  EXPECT_EQ(lora, 2 * 7 * 2);  // layers * targets * (A, B)
  EXPECT_TRUE(a->named_parameters()["model.layers.0.self_attn.q_proj.lora_A.weight"].equal(
      b->named_parameters()["model.layers.0.self_attn.q_proj.lora_A.weight"]));
  CausalLM c = load_model(fixture("llama2"));
  model::apply_lora(c, cfg, 43);
  EXPECT_FALSE(c->named_parameters()["model.layers.0.self_attn.q_proj.lora_A.weight"].equal(
      a->named_parameters()["model.layers.0.self_attn.q_proj.lora_A.weight"]));
  EXPECT_TRUE(a->forward(ref["input_ids"], ref["position_ids"]).allclose(base, 0, 0));
  EXPECT_THROW(model::apply_lora(a, cfg, 1), std::runtime_error);  // already adapted
  model::LoraConfig bad;
  bad.target_modules = {"lm_head"};
  EXPECT_THROW(model::apply_lora(c, bad, 1), std::runtime_error);
}

// Our adapter (a subset of the targets, rslora) is written for check_our_adapter.py to load into
// PEFT, for every family with a LoRA fixture.
TEST_P(LoraParity, SavedAdapterRoundTripsAndIsWrittenForPeft) {
  const std::string family = GetParam();
  torch::manual_seed(3);
  CausalLM m = load_model(fixture(family));
  model::LoraConfig cfg;
  cfg.r = 4;
  cfg.alpha = 16;
  const bool fused = m->config().family->fused_qkv;
  cfg.target_modules = fused ? std::vector<std::string>{"qkv_proj", "down_proj"}
                             : std::vector<std::string>{"q_proj", "v_proj", "down_proj"};
  cfg.use_rslora = true;
  model::apply_lora(m, cfg, 5);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : m->named_parameters())
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.1);
  }
  const std::string dir = output_dir("adapter/" + family);
  io::save_peft_adapter(m, cfg, fixture(family), dir);
  Ref ref(family);
  torch::NoGradGuard no_grad;
  m->eval();
  at::Tensor logits = m->forward(ref["input_ids"], ref["position_ids"]);
  io::save_safetensors(
      dir + "/our_logits.safetensors",
      {{"input_ids", ref["input_ids"]}, {"position_ids", ref["position_ids"]}, {"logits", logits}});

  CausalLM again = load_model(fixture(family));
  model::LoraConfig loaded = io::load_peft_adapter(again, dir);
  EXPECT_EQ(loaded.r, 4);
  EXPECT_TRUE(loaded.use_rslora);
  auto sorted = cfg.target_modules;
  std::sort(sorted.begin(), sorted.end());
  // (A mixture of experts' down_proj comes back as PEFT names it: mlp.experts.down_proj.)
  if (!m->config().family->has_experts()) {
    EXPECT_EQ(loaded.target_modules, sorted);
  }
  again->eval();
  EXPECT_TRUE(again->forward(ref["input_ids"], ref["position_ids"]).equal(logits));
}

// Merging folds the adapter into the weights; the saved folder is read by check_our_hf_model.py.
TEST_P(LoraParity, MergedModelSavesShardedAndReloads) {
  const std::string family = GetParam();
  CausalLM m = load_model(fixture(family));
  io::load_peft_adapter(m, fixture(family + "_lora"));
  Ref ref(family + "_lora");
  torch::NoGradGuard no_grad;
  m->eval();
  model::merge_lora(m);
  EXPECT_FALSE(model::has_lora(m));
  at::Tensor logits = m->forward(ref["input_ids"], ref["position_ids"]);
  EXPECT_LT(rel_err(logits, ref["logits"]), kTol);

  const std::string dir = output_dir("merged/" + family);
  io::save_hf_model(m, dir, at::kFloat, /*max_shard_bytes=*/40000);
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/model.safetensors"));
  io::save_safetensors(
      dir + "/our_logits.safetensors",
      {{"input_ids", ref["input_ids"]}, {"position_ids", ref["position_ids"]}, {"logits", logits}});
  CausalLM reloaded = load_model(dir);
  reloaded->eval();
  EXPECT_TRUE(reloaded->forward(ref["input_ids"], ref["position_ids"]).equal(logits));
  EXPECT_EQ(reloaded->config().tie_word_embeddings, m->config().tie_word_embeddings);
  EXPECT_EQ(reloaded->config().model_type, m->config().model_type);
}

INSTANTIATE_TEST_SUITE_P(Families, LoraParity,
                         ::testing::Values("llama32", "qwen2", "qwen3", "gemma3", "phi3",
                                           "qwen3_moe", "mixtral", "gpt_oss", "gemma3_mm"));

TEST(HfCheckpoint, Bf16SaveRoundsEveryParameter) {
  CausalLM m = load_model(fixture("llama2"));
  const std::string dir = output_dir("bf16");
  io::save_hf_model(m, dir, at::kBFloat16);
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors"));
  auto cfg = model::ModelConfig::from_dir(dir);
  EXPECT_EQ(cfg.torch_dtype, "bfloat16");
  io::SafetensorsFile f(dir + "/model.safetensors");
  for (const auto& p : m->named_parameters()) {
    at::Tensor t = f.tensor(p.key());
    EXPECT_EQ(t.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(t.equal(p.value().to(at::kBFloat16))) << p.key();
  }
}

TEST(HfCheckpoint, LoraModelMustBeMergedBeforeSaving) {
  CausalLM m = load_model(fixture("llama2"));
  model::apply_lora(m, model::LoraConfig{}, 1);
  EXPECT_THROW(io::save_hf_model(m, output_dir("unmerged"), at::kFloat), std::runtime_error);
}

// The multi-process path (train/embedding_gradient_sync): the lookup's gradient is collected as
// rows of a superset of the looked-up ids, and autograd gives the weight only the output layer's
// part (tied) or nothing (untied). Rows plus that part must be transformers' gradient.
TEST(Embedding, RowGradientsPlusAutogradPartEqualTransformersGradient) {
  for (const std::string name : {"llama2", "llama32"}) {  // untied, tied
    CausalLM m = load_model(fixture(name));
    Ref ref(name);
    auto& weight = m->model->embed_tokens->weight;
    auto rows = std::make_shared<model::EmbeddingRowGradients>();
    m->model->embed_tokens->row_gradients = rows;
    const int64_t vocab = weight.size(0);
    at::Tensor ids = ref["input_ids"];
    rows->reset(std::get<0>(at::_unique(
                    at::cat({ids.flatten(), torch::tensor({int64_t{0}, vocab - 1})}), true)),
                weight);

    at::Tensor hidden = m->hidden_states(ids, ref["position_ids"]);
    auto [loss_sum, n] = model::next_token_loss_sum(*m, hidden, ref["labels"], 5);
    (loss_sum / static_cast<double>(n)).backward();

    EXPECT_EQ(weight.grad().defined(), name == "llama32") << name;
    EXPECT_GT(rows->rows.abs().max().item<double>(), 0.0) << name;
    at::Tensor grad = weight.grad().defined() ? weight.grad().clone() : torch::zeros_like(weight);
    grad.index_add_(0, rows->row_ids, rows->rows);
    const at::Tensor expected = ref["grad.model.embed_tokens.weight"];
    EXPECT_LT((grad - expected).abs().max().item<double>(),
              kTol * std::max(1.0, expected.abs().max().item<double>()))
        << name;
  }
}

TEST(Embedding, LookedUpIdMissingFromTheRowsIsAnError) {
  CausalLM m = load_model(fixture("llama2"));
  Ref ref("llama2");
  auto rows = std::make_shared<model::EmbeddingRowGradients>();
  m->model->embed_tokens->row_gradients = rows;
  at::Tensor ids = ref["input_ids"];
  const int64_t missing = ids.flatten()[0].item<int64_t>();
  at::Tensor all = std::get<0>(at::_unique(ids.flatten(), true));
  rows->reset(all.index({all != missing}), m->model->embed_tokens->weight);
  at::Tensor hidden = m->hidden_states(ids, ref["position_ids"]);
  auto [loss_sum, n] = model::next_token_loss_sum(*m, hidden, ref["labels"]);
  EXPECT_THROW(loss_sum.backward(), c10::Error);
}

TEST(Loss, AllMaskedBatchGivesZeroAndBackwardWorks) {
  CausalLM m = load_model(fixture("llama2"));
  Ref ref("llama2");
  at::Tensor hidden = m->hidden_states(ref["input_ids"], ref["position_ids"]);
  auto [loss, n] = model::next_token_loss_sum(*m, hidden, at::full_like(ref["labels"], -100));
  EXPECT_EQ(n, 0);
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
}

TEST(Loss, LabelOutsideVocabularyThrows) {
  CausalLM m = load_model(fixture("llama2"));
  Ref ref("llama2");
  at::Tensor labels = ref["labels"].clone();
  labels[0][7] = 5000;
  at::Tensor hidden = m->hidden_states(ref["input_ids"], ref["position_ids"]);
  EXPECT_THROW(model::next_token_loss_sum(*m, hidden, labels), std::runtime_error);
}

TEST(Cuda, BfloatForwardRunsOnGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  CausalLM m = load_model(fixture("llama32"));
  m->to(torch::kCUDA, torch::kBFloat16);
  Ref ref("llama32");
  at::Tensor hidden =
      m->hidden_states(ref["packed_input_ids"].cuda(), ref["packed_position_ids"].cuda(),
                       ref["packed_segment_ids"].cuda());
  auto [loss, n] = model::next_token_loss_sum(*m, hidden, ref["packed_input_ids"].cuda());
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_EQ(n, 16);
}

// The GPU paths (fused RMSNorm, attention with grouped heads in the kernel, LoRA in the GEMM
// epilogue, the fused cross-entropy kernels) hold to the same transformers/peft references. In
// fp32, so the tolerance stays the CPU one.
TEST_P(FamilyParity, CudaLossAndGradientsInFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  CausalLM m = load_model(fixture(GetParam()));
  m->to(torch::kCUDA, torch::kFloat32);
  Ref ref(GetParam());
  {
    torch::NoGradGuard no_grad;
    m->eval();
    at::Tensor logits =
        m->forward(ref["input_ids"].cuda(), ref["position_ids"].cuda()).to(torch::kFloat32);
    EXPECT_LT(rel_err(logits, ref["logits"]), kTol);
  }
  check_loss_and_grads(m, ref, "CUDA fp32", torch::kCUDA);
}

TEST_P(LoraParity, CudaLossAndGradientsInFp32) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  CausalLM m = load_model(fixture(GetParam()));
  io::load_peft_adapter(m, fixture(GetParam() + "_lora"));
  m->to(torch::kCUDA, torch::kFloat32);
  check_loss_and_grads(m, Ref(GetParam() + "_lora"), "CUDA LoRA fp32", torch::kCUDA);
}

// What training on a GPU actually runs: fp32 master weights under bf16 autocast. The loss must
// stay within bf16 rounding of the fp32 reference and every gradient must point the same way.
TEST(Cuda, Bf16AutocastTracksTheFp32Reference) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  CausalLM m = load_model(fixture("llama32"));
  m->to(torch::kCUDA, torch::kFloat32);
  Ref ref("llama32");
  m->train();
  at::Tensor loss;
  int64_t n = 0;
  {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::Tensor hidden = m->hidden_states(ref["input_ids"].cuda(), ref["position_ids"].cuda());
    std::tie(loss, n) = model::next_token_loss_sum(*m, hidden, ref["labels"]);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  }
  at::Tensor mean = loss / static_cast<double>(n);
  EXPECT_NEAR(mean.item<double>(), ref["loss"].item<double>(), 2e-2 * ref["loss"].item<double>());
  mean.backward();
  for (const auto& p : m->named_parameters()) {
    at::Tensor g = p.value().grad().cpu().to(at::kDouble).flatten();
    at::Tensor r = ref["grad." + p.key()].to(at::kDouble).flatten();
    const double cosine = (g.dot(r) / (g.norm() * r.norm() + 1e-30)).item<double>();
    EXPECT_GT(cosine, 0.99) << p.key();
  }
}

// Loss and gradients of one bf16-autocast step (fp32 master weights), as training runs it.
struct AutocastStep {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
};

AutocastStep autocast_step(CausalLM& m, const Ref& ref) {
  m->train();
  m->zero_grad();
  at::Tensor mean;
  {
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::Tensor hidden = m->hidden_states(ref["input_ids"].cuda(), ref["position_ids"].cuda());
    auto [loss, n] = model::next_token_loss_sum(*m, hidden, ref["labels"]);
    mean = loss / static_cast<double>(n);
    at::autocast::set_autocast_enabled(at::kCUDA, false);
    at::autocast::clear_cache();
  }
  mean.backward();  // outside autocast, as in training: the recompute must bring its own
  AutocastStep step{mean.item<double>(), {}};
  for (const auto& p : m->named_parameters())
    if (p.value().requires_grad()) step.grads[p.key()] = p.value().grad().cpu().clone();
  return step;
}

// Recomputing a layer in backward must replay the forward's autocast: the same bf16 GEMMs, so
// the same loss and gradients as the run that kept its activations. (Recomputed in fp32, the
// LoRA run failed with "self and mat2 must have the same dtype" and full fine-tuning ran 8x
// slower with gradients off by bf16 rounding.)
void expect_checkpointing_changes_nothing(CausalLM& m, const Ref& ref, const std::string& what) {
  m->to(torch::kCUDA, torch::kFloat32);
  const AutocastStep kept = autocast_step(m, ref);
  m->set_recompute_layers(true);
  const AutocastStep recomputed = autocast_step(m, ref);
  EXPECT_NEAR(recomputed.loss, kept.loss, 1e-5 * kept.loss) << what;
  ASSERT_EQ(recomputed.grads.size(), kept.grads.size()) << what;
  for (const auto& [name, grad] : kept.grads)
    EXPECT_LT(rel_err(recomputed.grads.at(name), grad), 1e-3) << what << ": " << name;
  // The saved inputs through host memory and back (HostOffload's copy stream): the same values
  // (the gradients up to the order of atomic sums in attention's backward).
  m->set_recompute_offload(true);
  const AutocastStep offloaded = autocast_step(m, ref);
  m->set_recompute_offload(false);
  EXPECT_EQ(offloaded.loss, recomputed.loss) << what;
  for (const auto& [name, grad] : recomputed.grads)
    EXPECT_LT(rel_err(offloaded.grads.at(name), grad), 1e-5) << what << " offloaded: " << name;
}

TEST(Cuda, CheckpointingUnderAutocastGivesTheSameStepFullFineTuning) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  CausalLM m = load_model(fixture("llama32"));
  expect_checkpointing_changes_nothing(m, Ref("llama32"), "full");
}

// Every family's layers: the frozen MLP node runs on CUDA only (Phi's with its fused gate_up), and
// its recompute skips the MLP's output unless the layer reads it (Gemma's post-feed-forward norm).
TEST(Cuda, CheckpointingUnderAutocastGivesTheSameStepLora) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device: GPU path not exercised";
  for (const std::string family : {"llama32", "qwen3", "gemma3", "phi3", "qwen3_moe", "gpt_oss"}) {
    CausalLM m = load_model(fixture(family));
    io::load_peft_adapter(m, fixture(family + "_lora"));
    expect_checkpointing_changes_nothing(m, Ref(family + "_lora"), "LoRA " + family);
  }
}

}  // namespace
}  // namespace kubetune::testing
