// safetensors reading/writing and the errors users meet with broken model folders.
#include <torch/torch.h>

#include <cmath>
#include <fstream>

#include "test_util.h"
#include "trainer/io/peft_adapter.h"

namespace kubetune::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Runs `fn`, expects a std::runtime_error and returns its message.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::runtime_error";
  return "";
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}
void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }

std::string copy_folder(const std::string& from, const std::string& name) {
  std::string dir = output_dir(name);
  fs::copy(from, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

TEST(Safetensors, RoundTripsDtypesShapesAndMetadata) {
  torch::manual_seed(0);
  std::string path = output_dir("roundtrip") + "/t.safetensors";
  at::Tensor f32 = torch::randn({3, 5});
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"f32", f32},
      {"bf16", torch::randn({7}).to(at::kBFloat16)},
      {"f16", torch::randn({2, 2}).to(at::kHalf)},
      {"i64", torch::arange(10)},
      {"i32", torch::arange(3, at::kInt)},
      {"scalar", torch::tensor(2.5)},
      {"transposed", f32.t()},  // non-contiguous input
      {"empty", torch::zeros({0, 4})}};
  io::save_safetensors(path, tensors, {{"format", "pt"}, {"step", "7"}});
  io::SafetensorsFile f(path);
  EXPECT_EQ(f.names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    ASSERT_TRUE(f.contains(name)) << name;
    at::Tensor back = f.tensor(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(back.equal(t)) << name;
  }
  EXPECT_EQ(f.metadata()["step"], "7");
  EXPECT_FALSE(f.contains("missing"));
  std::string msg = error_of([&] { f.tensor("missing"); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing"), std::string::npos) << msg;
}

TEST(Safetensors, ViewsOutliveTheFileObjectAndDoNotWriteThrough) {
  std::string path = output_dir("mmap") + "/t.safetensors";
  io::save_safetensors(path, {{"x", torch::ones({4})}});
  at::Tensor view;
  {
    io::SafetensorsFile f(path);
    view = f.tensor("x");
  }
  view.add_(1);  // private mapping: the file keeps its ones
  EXPECT_EQ(view.sum().item<float>(), 8);
  EXPECT_EQ(io::SafetensorsFile(path).tensor("x").sum().item<float>(), 4);
}

TEST(Safetensors, MissingFileNamesThePath) {
  std::string msg =
      error_of([] { io::SafetensorsFile("/nonexistent/kubetune/model.safetensors"); });
  EXPECT_NE(msg.find("/nonexistent/kubetune/model.safetensors"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedFileIsReportedByReaderAndLoader) {
  std::string dir = copy_folder(fixture("llama2"), "truncated");
  std::string file = dir + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) / 2);
  std::string msg = error_of([&] { io::SafetensorsFile{file}; });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  msg = error_of([&] { load_model(dir); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;

  fs::resize_file(file, 5);  // not even the header length
  msg = error_of([&] { io::SafetensorsFile{file}; });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(HfCheckpoint, IndexNamingATensorAbsentFromItsShard) {
  std::string dir = copy_folder(fixture("llama_bias"), "bad_index");
  json index = read_json(dir + "/model.safetensors.index.json");
  std::string owner = index["weight_map"]["model.norm.weight"];
  std::string other = index["weight_map"]["model.embed_tokens.weight"];
  ASSERT_NE(owner, other);
  index["weight_map"]["model.norm.weight"] = other;
  write_json(dir + "/model.safetensors.index.json", index);
  std::string msg = error_of([&] { load_model(dir); });
  EXPECT_NE(msg.find("model.norm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir + "/" + other), std::string::npos) << msg;
  EXPECT_NE(msg.find("absent"), std::string::npos) << msg;
}

TEST(HfCheckpoint, ParameterMissingFromIndex) {
  std::string dir = copy_folder(fixture("llama_bias"), "missing_param");
  json index = read_json(dir + "/model.safetensors.index.json");
  index["weight_map"].erase("lm_head.weight");
  write_json(dir + "/model.safetensors.index.json", index);
  std::string msg = error_of([&] { load_model(dir); });
  EXPECT_NE(msg.find("lm_head.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
}

TEST(HfCheckpoint, ShapeMismatchNamesTensorAndFile) {
  auto cfg_json = read_json(fixture("llama2") + "/config.json");
  cfg_json["intermediate_size"] = 96;
  model::CausalLM m(model::ModelConfig::from_json(cfg_json, "test"));
  std::string msg = error_of([&] { io::load_hf_weights(m, fixture("llama2")); });
  EXPECT_NE(msg.find("mlp"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST(HfCheckpoint, MissingFolderOrConfig) {
  std::string msg = error_of([] { model::ModelConfig::from_dir("/nonexistent/kubetune-model"); });
  EXPECT_NE(msg.find("/nonexistent/kubetune-model"), std::string::npos) << msg;
  std::string dir = output_dir("no_config");
  msg = error_of([&] { model::ModelConfig::from_dir(dir); });
  EXPECT_NE(msg.find(dir + "/config.json"), std::string::npos) << msg;
  model::CausalLM m = load_model(fixture("llama2"));
  msg = error_of([&] { io::load_hf_weights(m, dir); });
  EXPECT_NE(msg.find("config.json"), std::string::npos) << msg;
  fs::copy_file(fixture("llama2") + "/config.json", dir + "/config.json");
  msg = error_of([&] { io::load_hf_weights(m, dir); });
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
}

TEST(ModelConfig, UnknownArchitectureNamesFileAndValue) {
  std::string dir = output_dir("gpt2");
  json cfg = read_json(fixture("llama2") + "/config.json");
  cfg["architectures"] = {"GPT2LMHeadModel"};
  write_json(dir + "/config.json", cfg);
  std::string msg = error_of([&] { model::ModelConfig::from_dir(dir); });
  EXPECT_NE(msg.find(dir + "/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("GPT2LMHeadModel"), std::string::npos) << msg;

  // A multimodal wrapper's language model is read from its text_config: without one, that field.
  cfg["architectures"] = {"Gemma3ForConditionalGeneration"};
  msg = error_of([&] { model::ModelConfig::from_json(cfg, "cfg.json"); });
  EXPECT_NE(msg.find("\"text_config\""), std::string::npos) << msg;

  cfg.erase("architectures");
  cfg["model_type"] = "gpt2";
  msg = error_of([&] { model::ModelConfig::from_json(cfg, "cfg.json"); });
  EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"gpt2\""), std::string::npos) << msg;
}

TEST(ModelConfig, ReadsTransformers4StyleRopeScaling) {
  json cfg = read_json(fixture("llama32") + "/config.json");
  json rope = cfg["rope_parameters"];
  cfg.erase("rope_parameters");
  cfg["rope_theta"] = rope["rope_theta"];
  rope.erase("rope_theta");
  rope.erase("rope_type");
  rope["type"] = "llama3";
  cfg["rope_scaling"] = rope;
  auto c = model::ModelConfig::from_json(cfg, "v4.json");
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 16);
  cfg["rope_scaling"]["type"] = "proportional";  // a transformers type kubetune lacks
  std::string msg = error_of([&] { model::ModelConfig::from_json(cfg, "v4.json"); });
  EXPECT_NE(msg.find("proportional"), std::string::npos) << msg;
}

// The Gemma 3 configs on the Hub were written by transformers 4: rope_theta and
// rope_local_base_freq, the global layers' rope_scaling, and sliding_window_pattern instead of
// layer_types. Read so, the fixture's model is the same model.
TEST(ModelConfig, ReadsGemma3Transformers4Layout) {
  json cfg = read_json(fixture("gemma3") + "/config.json");
  const auto v5 = model::ModelConfig::from_json(cfg, "v5.json");
  json full = cfg["rope_parameters"]["full_attention"];
  cfg["rope_theta"] = full["rope_theta"];
  cfg["rope_local_base_freq"] = cfg["rope_parameters"]["sliding_attention"]["rope_theta"];
  full.erase("rope_theta");
  cfg["rope_scaling"] = full;
  cfg.erase("rope_parameters");
  cfg.erase("layer_types");
  cfg.erase("_sliding_window_pattern");
  cfg["sliding_window_pattern"] = 2;
  const auto v4 = model::ModelConfig::from_json(cfg, "v4.json");
  EXPECT_EQ(v4.sliding_layers, v5.sliding_layers);
  EXPECT_EQ(v4.sliding_layers, (std::vector<bool>{true, false, true}));
  for (const auto& [a, b] : {std::pair{&v4.rope, &v5.rope}, {&v4.local_rope, &v5.local_rope}}) {
    EXPECT_EQ(a->type, b->type);
    EXPECT_EQ(a->theta, b->theta);
    EXPECT_EQ(a->factor, b->factor);
  }
  EXPECT_EQ(v4.rope.type, "linear");
  EXPECT_EQ(v4.local_rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(v4.attention_scale, 1 / std::sqrt(24.0));
  EXPECT_TRUE(v4.gelu_tanh);
}

// Phi-3.5's and Phi-4-mini's Hub configs: rope_scaling {"type": "longrope"} with the context
// lengths and partial_rotary_factor at the top level.
TEST(ModelConfig, ReadsPhi3HubLongRope) {
  json cfg = read_json(fixture("phi3") + "/config.json");
  const auto v5 = model::ModelConfig::from_json(cfg, "v5.json");
  json rope = cfg["rope_parameters"];
  cfg["rope_theta"] = rope["rope_theta"];
  cfg["partial_rotary_factor"] = rope["partial_rotary_factor"];
  cfg["rope_scaling"] = {{"type", "longrope"},
                         {"short_factor", rope["short_factor"]},
                         {"long_factor", rope["long_factor"]}};
  cfg.erase("rope_parameters");
  const auto v4 = model::ModelConfig::from_json(cfg, "v4.json");
  EXPECT_EQ(v4.rope.type, "longrope");
  EXPECT_EQ(v4.rope.short_factor, v5.rope.short_factor);
  EXPECT_EQ(v4.rope.long_factor, v5.rope.long_factor);
  EXPECT_EQ(v4.rope.original_max_position_embeddings, 16);
  EXPECT_DOUBLE_EQ(v4.rope.attention_factor, v5.rope.attention_factor);
  // factor = 64 / 16: sqrt(1 + ln 4 / ln 16) = sqrt(1.5)
  EXPECT_DOUBLE_EQ(v4.rope.attention_factor, std::sqrt(1.5));
  EXPECT_EQ(v4.rotary_dim(v4.rope), 12);

  cfg["rope_scaling"]["long_factor"] = json::array({1.0, 2.0});
  std::string msg = error_of([&] { model::ModelConfig::from_json(cfg, "v4.json"); });
  EXPECT_NE(msg.find("rope_scaling.long_factor"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 6 entries"), std::string::npos) << msg;
}

// What kubetune does not implement is refused by name, not trained differently.
TEST(ModelConfig, RefusesOptionsItDoesNotImplement) {
  json gemma = read_json(fixture("gemma3") + "/config.json");
  gemma["final_logit_softcapping"] = 30.0;
  std::string msg = error_of([&] { model::ModelConfig::from_json(gemma, "g.json"); });
  EXPECT_NE(msg.find("\"final_logit_softcapping\""), std::string::npos) << msg;
  json phi = read_json(fixture("phi4") + "/config.json");
  phi["resid_pdrop"] = 0.1;
  msg = error_of([&] { model::ModelConfig::from_json(phi, "p.json"); });
  EXPECT_NE(msg.find("\"resid_pdrop\""), std::string::npos) << msg;
  json qwen = read_json(fixture("qwen3") + "/config.json");
  qwen["hidden_act"] = "relu";
  msg = error_of([&] { model::ModelConfig::from_json(qwen, "q.json"); });
  EXPECT_NE(msg.find("\"hidden_act\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("relu"), std::string::npos) << msg;
}

TEST(PeftAdapter, UnsupportedOptionsAreRejected) {
  std::string dir = copy_folder(fixture("llama32_lora"), "dora");
  json cfg = read_json(dir + "/adapter_config.json");
  cfg["use_dora"] = true;
  write_json(dir + "/adapter_config.json", cfg);
  model::CausalLM m = load_model(fixture("llama32"));
  std::string msg = error_of([&] { io::load_peft_adapter(m, dir); });
  EXPECT_NE(msg.find("use_dora"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir + "/adapter_config.json"), std::string::npos) << msg;
}

TEST(HfCheckpoint, CopiesTokenizerFilesThatExist) {
  std::string from = output_dir("tok_from"), to = output_dir("tok_to");
  std::ofstream(from + "/tokenizer.json") << "{}";
  std::ofstream(from + "/chat_template.jinja") << "{{ x }}";
  std::ofstream(from + "/unrelated.txt") << "no";
  io::copy_tokenizer_files(from, to);
  EXPECT_TRUE(fs::exists(to + "/tokenizer.json"));
  EXPECT_TRUE(fs::exists(to + "/chat_template.jinja"));
  EXPECT_FALSE(fs::exists(to + "/unrelated.txt"));
  EXPECT_FALSE(fs::exists(to + "/tokenizer_config.json"));
}

}  // namespace
}  // namespace kubetune::testing
