// The building blocks of a decoder (every family of family.h): linear layers that can carry a
// LoRA adapter, RMSNorm, embedding, grouped-query attention, the gated MLP and the decoder layer.
// Parameter names follow the Hugging Face state_dict (q_proj.weight, input_layernorm.weight, ...).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/fp8.h"
#include "kernels/quant4.h"
#include "trainer/model/adapter_copies.h"
#include "trainer/model/model_config.h"

namespace kubetune::model {

// A new parameter of `shape`, filled with `fill` when given (else uninitialised). With a meta
// device in `opts`, a CPU placeholder instead, never filled: the shape with one element of memory
// (zero strides), whose storage set_data() later swaps for a real one on any device, which a meta
// tensor cannot take (train::load_model fills a model part by part).
torch::Tensor new_parameter(at::IntArrayRef shape, const torch::TensorOptions& opts,
                            std::optional<double> fill = std::nullopt);

// Initialises the parameters of `module` as transformers' _init_weights does: normal(0,
// initializer_range), zero biases, unit norm weights, from the default generator of each
// parameter's device.
void init_like_hf(torch::nn::Module& module, double initializer_range);

// One LoRA factor ("lora_A" or "lora_B"): a module holding a single "weight", so the parameter
// is named ...q_proj.lora_A.weight like in PEFT's saved adapters.
class LoraWeightImpl : public torch::nn::Module {
 public:
  explicit LoraWeightImpl(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};
TORCH_MODULE(LoraWeight);

// LoRA's FP8 bases of the layers whose input gradients backward takes as one product (q, k and v;
// gate and up; o or down alone: frozen_linear_group.h), transposed side by side once
// (fp8_linear.h: keep_fp8_transposed) instead of in every step.
struct Fp8TransposedGroup {
  torch::Tensor values;      // [in_features, sum of out_features] float8_e4m3fn
  torch::Tensor row_scales;  // [sum of out_features] float32: the layers' row scales in order
};

// y = x W^T + b, plus PEFT's LoRA branch B(A(dropout(x))) * scaling once add_lora was called.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias,
             const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);

  // A [r,in] and B [out,r] become trainable parameters; the base weight is left untouched.
  void add_lora(torch::Tensor a, torch::Tensor b, double scaling, double dropout);
  bool has_lora() const { return !lora_A_.is_empty(); }
  // W += B A * scaling (computed in fp32), then the adapter is removed. A 4-bit W is
  // dequantized first and stays in the compute dtype.
  void merge_lora();

  // QLoRA: W is replaced by its 4-bit form (bitsandbytes' NF4/FP4, on W's device), dequantized
  // into `compute_dtype` in each forward and backward; `weight` becomes empty. The type, blocksize
  // and double quantization of a weight loaded already quantized are its own.
  void quantize_4bit(const std::string& type, int64_t blocksize, bool double_quant,
                     torch::ScalarType compute_dtype);
  // A weight read already quantized (a bitsandbytes 4-bit checkpoint); quantize_4bit then only
  // moves it to the weight's device and sets the compute dtype.
  void set_quantized(kernels::Quant4State state);
  bool is_quantized() const { return quantized_.packed.defined(); }

  // model.precision fp8 (trainer/model/fp8_linear.h): the base product in FP8 from now on. A
  // frozen bf16 weight is replaced by its FP8 form (`weight` becomes empty); a 4-bit one stays
  // and is converted for each product; a trainable one is quantized in each forward. Returns
  // false, and changes nothing, for a shape cuBLASLt's FP8 GEMM cannot take.
  bool use_fp8();
  bool uses_fp8() const { return fp8_products_; }
  // The frozen base weight in FP8: the kept form, or the 4-bit one converted.
  kernels::Fp8Rows fp8_base() const;
  // Its transpose, for an input gradient: the kept form transposed, or the 4-bit one converted
  // straight to that layout.
  kernels::Fp8Transposed fp8_base_transposed() const;
  // Those values written into columns [first_column, first_column + out_features()) of `out`
  // ([in_features, N] float8), beside other layers' (trainer/model/fp8_linear.h).
  void fp8_base_transposed_into(torch::Tensor& out, int64_t first_column) const;
  // The FP8 base's row scales, [out_features, 1] float32.
  torch::Tensor fp8_base_row_scales() const;
  // A frozen bf16 base kept in FP8 (LoRA under fp8), which keep_fp8_transposed can also keep
  // transposed.
  bool keeps_fp8_base() const { return fp8_weight_.values.defined(); }
  // From now on this layer's W^T is columns [column, column + out_features()) of `group`.
  void keep_fp8_base_transposed(std::shared_ptr<const Fp8TransposedGroup> group, int64_t column);
  // That group (null when none is kept) and this layer's first column in it.
  const Fp8TransposedGroup* fp8_transposed_group() const { return fp8_transposed_group_.get(); }
  int64_t fp8_transposed_column() const { return fp8_transposed_column_; }

  int64_t out_features() const { return shape_of_weight()[0]; }
  int64_t in_features() const { return shape_of_weight()[1]; }
  const kernels::Quant4State& quantized() const { return quantized_; }
  torch::ScalarType quantized_compute_dtype() const { return compute_dtype_; }
  torch::Tensor& lora_A() { return lora_A_->weight; }
  torch::Tensor& lora_B() { return lora_B_->weight; }
  // A and B in the products' dtype: the copies the layer's refresh made (adapter_copies.h) while
  // they are current, else cast here.
  torch::Tensor lora_A_as(at::ScalarType dtype) const {
    return lora_A_copy_.of(lora_A_->weight, dtype);
  }
  torch::Tensor lora_B_as(at::ScalarType dtype) const {
    return lora_B_copy_.of(lora_B_->weight, dtype);
  }
  // Appends (copy, weight) for A and B, for refresh_compute_copies.
  void add_adapter_copies(std::vector<std::pair<ComputeCopy*, torch::Tensor>>& out) {
    if (!has_lora()) return;
    out.emplace_back(&lora_A_copy_, lora_A_->weight);
    out.emplace_back(&lora_B_copy_, lora_B_->weight);
  }
  double lora_scaling() const { return scaling_; }
  double lora_dropout() const { return dropout_; }

  torch::Tensor weight, bias;  // bias is undefined when the layer has none

 private:
  torch::Tensor base_forward(const torch::Tensor& x);
  void check_frozen_fp8_base() const;  // throws unless use_fp8() made a frozen FP8 base
  std::vector<int64_t> shape_of_weight() const;

  LoraWeight lora_A_{nullptr}, lora_B_{nullptr};
  ComputeCopy lora_A_copy_, lora_B_copy_;
  double scaling_ = 0, dropout_ = 0;
  kernels::Quant4State quantized_;  // QLoRA's base weight; packed undefined otherwise
  torch::ScalarType compute_dtype_ = torch::kBFloat16;
  kernels::Fp8Rows fp8_weight_;  // a frozen bf16 base weight's FP8 form; undefined otherwise
  // A 4-bit base under fp8: its rows' largest magnitudes ([out] float32, computed once) and the
  // row scales made of them ([out, 1]); undefined otherwise.
  torch::Tensor fp8_row_amax_, fp8_row_scales_;
  std::shared_ptr<const Fp8TransposedGroup> fp8_transposed_group_;  // null unless kept
  int64_t fp8_transposed_column_ = 0;
  bool fp8_products_ = false;
};
TORCH_MODULE(Linear);

class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps, const torch::TensorOptions& opts,
              NormWeight style = NormWeight::kScale);
  // Normalises in fp32, then applies the weight as the family does (family.h: NormWeight):
  // LlamaRMSNorm casts back to the input dtype and scales; Gemma3RMSNorm scales by (1 + w) in
  // fp32 and casts last; GptOssRMSNorm scales by w in fp32 and casts last.
  torch::Tensor forward(const torch::Tensor& x);
  // Whether x takes the GPU kernels (LibTorch's fused RMSNorm, or ours fused with RoPE): on a GPU,
  // with the weight in x's dtype.
  bool runs_fused(const torch::Tensor& x) const {
    return x.is_cuda() && weight.scalar_type() == x.scalar_type();
  }
  // The factor the kernels multiply by: the weight, or Gemma's 1 + w (rounded to its dtype).
  torch::Tensor scale() const { return style_ == NormWeight::kOnePlusScale ? weight + 1 : weight; }
  double eps() const { return eps_; }
  // What the weight starts as in a fresh model (transformers' _init_weights): 1, or 0 for (1 + w).
  double initial_weight() const { return style_ == NormWeight::kScale ? 1.0 : 0.0; }
  torch::Tensor weight;

 private:
  double eps_;
  NormWeight style_;
};
TORCH_MODULE(RMSNorm);

// The gradient of an embedding lookup, kept as rows of a small dense matrix instead of the
// [vocab, hidden] gradient autograd would make. Across processes only the rows some rank looked
// up need summing, a few percent of the vocabulary for a step's batch (see
// trainer/parallel/embedding_gradient_sync.h).
struct EmbeddingRowGradients {
  torch::Tensor row_ids;  // [R] int64, sorted: every id that may be looked up until the next reset
  torch::Tensor rows;     // [R, hidden]: rows[i] is the summed gradient of row row_ids[i]

  // Starts a new collection over `row_ids` (int64, host or device) on the weight's device.
  void reset(const torch::Tensor& row_ids, const torch::Tensor& weight);
  // rows[position of ids[n]] += grad[n]. Every id must be in row_ids.
  void add(const torch::Tensor& ids, const torch::Tensor& grad);
};

class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t vocab, int64_t dim, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor weight;
  // When set (and the weight is trainable), backward adds the lookup's gradient here and gives
  // the weight none through autograd: a tied weight's gradient is then complete as soon as the
  // output layer's part is, early in backward.
  std::shared_ptr<EmbeddingRowGradients> row_gradients;
};
TORCH_MODULE(Embedding);

// What each attention layer needs besides its input: rotary cos/sin and the mask.
struct AttentionInputs {
  torch::Tensor cos, sin;
  torch::Tensor mask;  // bool [B,1,T,T] (true = may attend); undefined = plain causal
  // What the mask holds, for kernels that take a window instead of a mask: the layer's sliding
  // window (0: none), and whether it also keeps packed segments (and padding) apart.
  int64_t window = 0;
  bool segmented = false;
};

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& in);
  // The linears whose input gradients backward takes as one product, in its order: q, k, v (or
  // the fused qkv); o.
  std::vector<std::vector<LinearImpl*>> input_gradient_groups();
  // q_proj, k_proj and v_proj, or qkv_proj alone in families that fuse them (the others null).
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, qkv_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // over each head, in families with qk_norm
  torch::Tensor sinks;  // [heads]: each head's sink logit, in families with attention_sinks

 private:
  // q, k and v as [B,T,heads*D] each.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project(const torch::Tensor& x);
  int64_t heads_, kv_heads_, head_dim_;
  double dropout_, scale_;
};
TORCH_MODULE(Attention);

// The gated MLP: down(act(gate(x)) * up(x)), act SiLU (SwiGLU) or tanh GELU (GeGLU).
class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const ModelConfig& c, const torch::TensorOptions& opts);
  torch::Tensor forward(const torch::Tensor& x);
  // As AttentionImpl's: gate, up (or the fused gate_up); down.
  std::vector<std::vector<LinearImpl*>> input_gradient_groups();
  // gate_proj and up_proj, or gate_up_proj alone in families that fuse them (the others null).
  Linear gate_proj{nullptr}, up_proj{nullptr}, gate_up_proj{nullptr}, down_proj{nullptr};

 private:
  bool gelu_tanh_;
};
TORCH_MODULE(MLP);

class SparseMoeImpl;

// The dtype a layer's products run in for input x: autocast's, as for LibTorch's own layers, else
// x's.
at::ScalarType product_dtype(const torch::Tensor& x);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& c, const torch::TensorOptions& opts, int64_t index = 0);
  torch::Tensor forward(const torch::Tensor& x, const AttentionInputs& in);
  // The layer's adapters in the products' dtype for this forward, in one batched copy
  // (adapter_copies.h); called once its weights are in place (after the stage's gather).
  void refresh_adapter_copies(at::ScalarType dtype);
  Attention self_attn{nullptr};
  // The gated MLP, or in a mixture of experts' sparse layers (config.is_sparse) the experts and
  // their router (experts.h); both are named "mlp", as in transformers.
  MLP mlp{nullptr};
  std::shared_ptr<SparseMoeImpl> moe;
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  // Families with sandwich norms (Gemma 3): post_attention_layernorm normalises the attention's
  // output, these the MLP's input and output.
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

}  // namespace kubetune::model
