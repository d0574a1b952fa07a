#include "trainer/model/layers.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>

#include "kernels/fp8_from_4bit.h"
#include "kernels/rms_norm_rope.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "trainer/model/device_copy.h"
#include "trainer/model/experts.h"
#include "trainer/model/fp8_linear.h"
#include "trainer/model/frozen_linear_group.h"
#include "trainer/model/linear_4bit.h"
#include "trainer/model/rope.h"
#include "trainer/model/sink_attention.h"

namespace kubetune::model {

torch::Tensor new_parameter(at::IntArrayRef shape, const torch::TensorOptions& opts,
                            std::optional<double> fill) {
  if (opts.device().is_meta())
    return at::empty_strided(shape, std::vector<int64_t>(shape.size(), 0),
                             opts.device(torch::kCPU));
  return fill ? torch::full(shape, *fill, opts) : torch::empty(shape, opts);
}

namespace {

// The parameters a module holds itself (not its children's).
void init_own_parameters(torch::nn::Module& m, double initializer_range) {
  const auto* norm = dynamic_cast<RMSNormImpl*>(&m);
  // gpt-oss's router draws its bias as its weight; other biases (the experts' too) start at 0.
  const bool router = dynamic_cast<RouterImpl*>(&m) != nullptr;
  for (auto& p : m.named_parameters(/*recurse=*/false)) {
    const std::string& name = p.key();
    const bool bias =
        name == "bias" || (name.size() > 5 && name.substr(name.size() - 5) == "_bias");
    if (norm)
      p.value().fill_(norm->initial_weight());
    else if (bias && !router)
      p.value().zero_();
    else
      p.value().normal_(0.0, initializer_range);
  }
}

}  // namespace

void init_like_hf(torch::nn::Module& module, double initializer_range) {
  torch::NoGradGuard no_grad;
  // Children through modules(include_self=false): `module` may still be under construction, not
  // yet owned by a shared_ptr.
  init_own_parameters(module, initializer_range);
  for (const auto& child : module.modules(/*include_self=*/false))
    init_own_parameters(*child, initializer_range);
}

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool has_bias,
                       const torch::TensorOptions& opts) {
  weight = register_parameter("weight", new_parameter({out_features, in_features}, opts));
  if (has_bias) bias = register_parameter("bias", new_parameter({out_features}, opts, 0.0));
}

std::vector<int64_t> LinearImpl::shape_of_weight() const {
  if (is_quantized()) return quantized_.shape;
  if (fp8_weight_.values.defined()) return {fp8_weight_.rows(), fp8_weight_.cols()};
  return weight.sizes().vec();
}

torch::Tensor LinearImpl::base_forward(const torch::Tensor& x) {
  if (!is_quantized() && !fp8_products_) return at::linear(x, weight, bias);
  torch::Tensor out;
  if (fp8_products_) {
    const auto dtype = product_dtype(x);
    out =
        weight.requires_grad() ? fp8_linear(x, weight, dtype) : fp8_frozen_linear(x, *this, dtype);
  } else {
    out = linear_4bit(x, quantized_, compute_dtype_);
  }
  return bias.defined() ? out + bias.to(out.scalar_type()) : out;
}

bool LinearImpl::use_fp8() {
  if (!kernels::fp8_shape_supported(out_features(), in_features())) return false;
  fp8_products_ = true;
  torch::NoGradGuard no_grad;
  if (is_quantized()) {
    fp8_row_amax_ = kernels::row_amax_4bit(quantized_, compute_dtype_);
    fp8_row_scales_ = kernels::fp8_row_scales(fp8_row_amax_);
  } else if (!weight.requires_grad()) {
    fp8_weight_ = kernels::quantize_rows_fp8(weight.detach());
    weight.set_data(torch::empty({0}, weight.options()));  // frees the bf16 copy
  }
  return true;
}

void LinearImpl::check_frozen_fp8_base() const {
  TORCH_CHECK(fp8_products_, "the layer's FP8 base is asked for, but use_fp8() was not called");
  TORCH_CHECK(fp8_weight_.values.defined() || is_quantized(),
              "the layer's FP8 base is asked for, but its weight is trainable, not a frozen base");
}

kernels::Fp8Rows LinearImpl::fp8_base() const {
  if (fp8_weight_.values.defined()) return fp8_weight_;
  check_frozen_fp8_base();
  return {kernels::fp8_from_4bit(quantized_, fp8_row_amax_, compute_dtype_, /*transposed=*/false),
          fp8_row_scales_};
}

kernels::Fp8Transposed LinearImpl::fp8_base_transposed() const {
  if (fp8_transposed_group_) {
    const torch::Tensor& all = fp8_transposed_group_->values;
    // This layer's product alone (layers not grouped, e.g. under LoRA dropout, or a group's
    // other members without gradients): its columns copied.
    return {all.size(1) == out_features()
                ? all
                : all.narrow(1, fp8_transposed_column_, out_features()).contiguous(),
            fp8_weight_.scales};
  }
  if (fp8_weight_.values.defined()) return kernels::transposed(fp8_weight_);
  check_frozen_fp8_base();
  return {kernels::fp8_from_4bit(quantized_, fp8_row_amax_, compute_dtype_, /*transposed=*/true),
          fp8_row_scales_};
}

void LinearImpl::fp8_base_transposed_into(torch::Tensor& out, int64_t first_column) const {
  if (fp8_weight_.values.defined())
    return kernels::transpose_fp8_into(fp8_weight_.values, out, first_column);
  check_frozen_fp8_base();
  kernels::fp8_from_4bit_transposed_into(quantized_, fp8_row_amax_, compute_dtype_, out,
                                         first_column);
}

void LinearImpl::keep_fp8_base_transposed(std::shared_ptr<const Fp8TransposedGroup> group,
                                          int64_t column) {
  TORCH_CHECK(keeps_fp8_base(), "only a frozen base kept in FP8 is kept transposed");
  fp8_transposed_group_ = std::move(group);
  fp8_transposed_column_ = column;
}

torch::Tensor LinearImpl::fp8_base_row_scales() const {
  if (fp8_weight_.values.defined()) return fp8_weight_.scales;
  check_frozen_fp8_base();
  return fp8_row_scales_;
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  if (can_group(x, {this})) return frozen_linear_group(x, {this})[0];
  torch::Tensor out = base_forward(x);
  if (!has_lora()) return out;
  // PEFT: the input is cast to the adapter's dtype, dropout only touches the LoRA branch, and
  // the sum is cast back to the base layer's output dtype. Under autocast without dropout the
  // cast is skipped: autocast would cast the fp32 copy straight back, so the result is the same
  // bits without a copy of the activations (and its backward) per adapter.
  const bool autocast_on = at::autocast::is_autocast_enabled(x.device().type());
  torch::Tensor h = x;
  if (!(autocast_on && dropout_ == 0)) h = x.to(lora_A_->weight.scalar_type());
  if (dropout_ > 0) h = at::dropout(h, dropout_, is_training());
  if (x.is_cuda()) {
    // out + scaling * (h A^T) B^T with the sum and the scaling in the GEMM's epilogue: two fewer
    // passes over the [tokens, out_features] output, forward and backward. (PEFT rounds the
    // product, the scaled product and the sum separately; this rounds once.)
    const auto out_features = out.size(-1);
    torch::Tensor ha = at::mm(h.reshape({-1, h.size(-1)}), lora_A_->weight.t());
    return at::addmm(out.reshape({-1, out_features}), ha, lora_B_->weight.t(), /*beta=*/1,
                     /*alpha=*/scaling_)
        .view(out.sizes())
        .to(out.scalar_type());
  }
  torch::Tensor delta = at::linear(at::linear(h, lora_A_->weight), lora_B_->weight) * scaling_;
  return (out + delta).to(out.scalar_type());
}

void LinearImpl::add_lora(torch::Tensor a, torch::Tensor b, double scaling, double dropout) {
  TORCH_CHECK(!has_lora(), "layer already has a LoRA adapter");
  lora_A_ = register_module("lora_A", LoraWeight(std::move(a)));
  lora_B_ = register_module("lora_B", LoraWeight(std::move(b)));
  scaling_ = scaling;
  dropout_ = dropout;
}

void LinearImpl::set_quantized(kernels::Quant4State state) {
  quantized_ = std::move(state);
  weight.set_data(torch::empty({0}, weight.options()));
}

void LinearImpl::quantize_4bit(const std::string& type, int64_t blocksize, bool double_quant,
                               torch::ScalarType compute_dtype) {
  torch::NoGradGuard no_grad;
  compute_dtype_ = compute_dtype;
  if (is_quantized()) {  // loaded so: to the device the model went to
    const auto device = weight.device();
    quantized_.packed = quantized_.packed.to(device);
    quantized_.absmax = quantized_.absmax.to(device);
    if (quantized_.double_quant()) quantized_.nested_absmax = quantized_.nested_absmax.to(device);
    return;
  }
  quantized_ = kernels::quantize_4bit(weight.detach(), type, blocksize, double_quant);
  weight.set_data(torch::empty({0}, weight.options()));  // frees the full-precision copy
}

void LinearImpl::merge_lora() {
  if (!has_lora()) return;
  torch::NoGradGuard no_grad;
  if (is_quantized()) {  // back in the dtype it was stored in, as bitsandbytes' quant_state.dtype
    weight.set_data(kernels::dequantize_4bit(quantized_, weight.scalar_type()));
    quantized_ = kernels::Quant4State();
    fp8_row_amax_ = fp8_row_scales_ = torch::Tensor();
    fp8_products_ = false;  // the merged weight is a plain one
  }
  if (fp8_weight_.values.defined()) {
    weight.set_data(kernels::dequantize_rows_fp8(fp8_weight_, weight.scalar_type()));
    fp8_weight_ = kernels::Fp8Rows();
    fp8_transposed_group_.reset();  // freed with the group's last member
    fp8_products_ = false;
  }
  torch::Tensor delta = at::matmul(lora_B_->weight.to(at::kFloat), lora_A_->weight.to(at::kFloat));
  weight.copy_(
      (weight.to(at::kFloat) + delta.to(weight.device()) * scaling_).to(weight.scalar_type()));
  unregister_module("lora_A");
  unregister_module("lora_B");
  lora_A_ = nullptr;
  lora_B_ = nullptr;
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, const torch::TensorOptions& opts,
                         NormWeight style)
    : eps_(eps), style_(style) {
  weight = register_parameter("weight", new_parameter({dim}, opts, initial_weight()));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  const bool one_plus = style_ == NormWeight::kOnePlusScale;
  // On GPUs, LibTorch's fused kernel: one pass instead of six, and no fp32 copies kept for
  // backward. It rounds once where transformers rounds twice (before and after the weight), and
  // Gemma's 1 + w is rounded to the input's dtype first: a bf16 ulp at most. The CPU path keeps
  // transformers' exact formulas for the parity tests.
  if (runs_fused(x)) return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, scale(), eps_));
  torch::Tensor h = x.to(at::kFloat);
  torch::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * at::rsqrt(variance + eps_);
  if (one_plus) return (h * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
  if (style_ == NormWeight::kScaleInFloat) return (weight * h).to(x.scalar_type());
  return weight * h.to(x.scalar_type());
}

EmbeddingImpl::EmbeddingImpl(int64_t vocab, int64_t dim, const torch::TensorOptions& opts) {
  weight = register_parameter("weight", new_parameter({vocab, dim}, opts));
}

void EmbeddingRowGradients::reset(const torch::Tensor& ids, const torch::Tensor& weight) {
  row_ids = to_device_async(ids, weight.device());
  rows = torch::zeros({row_ids.numel(), weight.size(1)}, weight.options());
}

void EmbeddingRowGradients::add(const torch::Tensor& ids, const torch::Tensor& grad) {
  const auto flat_ids = ids.reshape({-1});
  const auto position = torch::searchsorted(row_ids, flat_ids);
  // Checked on the CPU (the tests); on a GPU the check would make the host wait for the device.
  if (!row_ids.is_cuda())
    TORCH_CHECK(row_ids.index_select(0, position.clamp_max(row_ids.numel() - 1)).equal(flat_ids),
                "EmbeddingRowGradients: a looked-up id is not among the step's rows");
  rows.index_add_(0, position, grad.reshape({-1, rows.size(1)}).to(rows.scalar_type()));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) {
  if (!row_gradients || !weight.requires_grad() || !torch::GradMode::is_enabled())
    return at::embedding(weight, ids);
  // The lookup of a detached weight is a leaf; its hook receives d(loss)/d(output).
  auto out = at::embedding(weight.detach(), ids).requires_grad_(true);
  out.register_hook([sink = row_gradients, ids](const torch::Tensor& grad) {
    sink->add(ids, grad);
    return torch::Tensor();
  });
  return out;
}

AttentionImpl::AttentionImpl(const ModelConfig& c, const torch::TensorOptions& opts)
    : heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      dropout_(c.attention_dropout),
      scale_(c.attention_scale) {
  const int64_t h = c.hidden_size, q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
  const bool bias = c.attention_bias;
  if (c.family->fused_qkv) {
    qkv_proj = register_module("qkv_proj", Linear(h, q + 2 * kv, bias, opts));
  } else {
    q_proj = register_module("q_proj", Linear(h, q, bias, opts));
    k_proj = register_module("k_proj", Linear(h, kv, bias, opts));
    v_proj = register_module("v_proj", Linear(h, kv, bias, opts));
  }
  o_proj = register_module("o_proj", Linear(q, h, c.o_proj_bias(), opts));
  if (c.family->attention_sinks) sinks = register_parameter("sinks", new_parameter({heads_}, opts));
  if (c.family->qk_norm) {
    q_norm =
        register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps, opts, c.family->norm_weight));
    k_norm =
        register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps, opts, c.family->norm_weight));
  }
}

namespace {
// [B,kv,T,D] -> [B,kv*n_rep,T,D], each kv head repeated for its group of query heads (repeat_kv).
torch::Tensor repeat_kv(const torch::Tensor& x, int64_t n_rep) {
  if (n_rep == 1) return x;
  auto s = x.sizes();
  return x.unsqueeze(2)
      .expand({s[0], s[1], n_rep, s[2], s[3]})
      .reshape({s[0], s[1] * n_rep, s[2], s[3]});
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> AttentionImpl::project(
    const torch::Tensor& x) {
  if (qkv_proj) {  // one product; q, k and v are views of its columns
    const torch::Tensor qkv = qkv_proj->forward(x);
    const int64_t q = heads_ * head_dim_, kv = kv_heads_ * head_dim_;
    // One split, not three narrows: its backward is one cat of the three gradients, where each
    // narrow's wrote a zero-filled [tokens, q + 2 kv] tensor and autograd added the three (on
    // Phi-4, 3 fills, 3 copies and 2 additions of 63 MB a layer).
    const auto parts = qkv.split_with_sizes({q, kv, kv}, -1);
    return {parts[0], parts[1], parts[2]};
  }
  const std::vector<LinearImpl*> qkv = input_gradient_groups().front();
  if (can_group(x, qkv)) {
    auto out = frozen_linear_group(x, qkv);
    return {out[0], out[1], out[2]};
  }
  return {q_proj->forward(x), k_proj->forward(x), v_proj->forward(x)};
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const AttentionInputs& in) {
  const int64_t B = x.size(0), T = x.size(1);
  auto [q, k, v] = project(x);
  // [B,T,heads*D] -> [B,T,heads,D]: a view, or a copy of a fused product's columns.
  auto heads = [&](const torch::Tensor& t) { return t.reshape({B, T, -1, head_dim_}); };
  q = heads(q), k = heads(k);
  // The fused kernels on [B,T,heads,D] where they rotate whole heads; the CPU (and partial rotary)
  // keeps transformers' formulas.
  const bool rope_kernel = x.is_cuda() && in.cos.size(-1) == head_dim_;
  if (q_norm && rope_kernel && q_norm->runs_fused(q) && kernels::rms_norm_rope_fits(head_dim_)) {
    // Qwen3's and Gemma 3's per-head norms and the rotation in one kernel, which reads the
    // projection's columns in place.
    q = kernels::rms_norm_rope(q, q_norm->scale(), in.cos, in.sin, q_norm->eps()).transpose(1, 2);
    k = kernels::rms_norm_rope(k, k_norm->scale(), in.cos, in.sin, k_norm->eps()).transpose(1, 2);
  } else {
    if (q_norm) q = q_norm->forward(q), k = k_norm->forward(k);  // over each head's D values
    if (rope_kernel) {
      q = kernels::rope(q.contiguous(), in.cos, in.sin).transpose(1, 2);
      k = kernels::rope(k.contiguous(), in.cos, in.sin).transpose(1, 2);
    } else {
      q = apply_rope(q.transpose(1, 2), in.cos, in.sin);
      k = apply_rope(k.transpose(1, 2), in.cos, in.sin);
    }
  }
  v = heads(v).transpose(1, 2);
  const double p = is_training() ? dropout_ : 0.0;
  if (sinks.defined()) {  // k and v with their own heads: the flash kernel reads groups itself
    const SinkAttentionMask mask{in.mask, in.window, in.segmented};
    torch::Tensor out = attention_with_sinks(q, k, v, mask, sinks, scale_, p, is_training());
    return o_proj->forward(out.transpose(1, 2).reshape({B, T, -1}));
  }
  // Flash attention reads grouped key/value heads itself (as transformers asks it to); other
  // backends and the CPU get the heads repeated.
  const bool gqa_in_kernel = x.is_cuda() && !in.mask.defined();
  if (!gqa_in_kernel) {
    k = repeat_kv(k, heads_ / kv_heads_);
    v = repeat_kv(v, heads_ / kv_heads_);
  }
  std::optional<at::Tensor> mask;
  if (in.mask.defined()) mask = in.mask;
  torch::Tensor out =
      at::scaled_dot_product_attention(q, k, v, mask, p, /*is_causal=*/!in.mask.defined(), scale_,
                                       /*enable_gqa=*/gqa_in_kernel && heads_ != kv_heads_);
  return o_proj->forward(out.transpose(1, 2).reshape({B, T, -1}));
}

std::vector<std::vector<LinearImpl*>> AttentionImpl::input_gradient_groups() {
  if (qkv_proj) return {{qkv_proj.get()}, {o_proj.get()}};
  return {{q_proj.get(), k_proj.get(), v_proj.get()}, {o_proj.get()}};
}

at::ScalarType product_dtype(const torch::Tensor& x) {
  const auto device = x.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device)
                                                   : x.scalar_type();
}

void DecoderLayerImpl::refresh_adapter_copies(at::ScalarType dtype) {
  std::vector<std::pair<ComputeCopy*, torch::Tensor>> copies;
  for (const auto& m : modules(/*include_self=*/false))
    if (auto* linear = dynamic_cast<LinearImpl*>(m.get())) linear->add_adapter_copies(copies);
  refresh_compute_copies(copies, dtype);
}

MLPImpl::MLPImpl(const ModelConfig& c, const torch::TensorOptions& opts) : gelu_tanh_(c.gelu_tanh) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  if (c.family->fused_gate_up) {
    gate_up_proj = register_module("gate_up_proj", Linear(h, 2 * i, c.mlp_bias, opts));
  } else {
    gate_proj = register_module("gate_proj", Linear(h, i, c.mlp_bias, opts));
    up_proj = register_module("up_proj", Linear(h, i, c.mlp_bias, opts));
  }
  down_proj = register_module("down_proj", Linear(i, h, c.mlp_bias, opts));
}

std::vector<std::vector<LinearImpl*>> MLPImpl::input_gradient_groups() {
  if (gate_up_proj) return {{gate_up_proj.get()}, {down_proj.get()}};
  return {{gate_proj.get(), up_proj.get()}, {down_proj.get()}};
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  const auto act = gelu_tanh_ ? kernels::GateActivation::kGeluTanh : kernels::GateActivation::kSilu;
  std::vector<LinearImpl*> linears = input_gradient_groups().front();
  linears.push_back(down_proj.get());
  const bool fp8 = std::any_of(linears.begin(), linears.end(),
                               [](const LinearImpl* l) { return l->uses_fp8(); });
  if (mlp_node_computes(act, fp8) && can_group(x, linears))
    return frozen_gated_mlp(x, linears, act);
  // On GPUs the fused kernels save a pass over memory and one saved activation (and read a fused
  // gate_up_proj's halves in place); the CPU keeps transformers' formulas, which the parity tests
  // hold against transformers.
  torch::Tensor gate, up;
  if (gate_up_proj) {  // Phi-3: the first half of the columns is the gate
    const torch::Tensor gate_up = gate_up_proj->forward(x);
    if (x.is_cuda()) return down_proj->forward(kernels::gated_activation_packed(gate_up, act));
    const int64_t i = gate_up.size(-1) / 2;
    gate = gate_up.narrow(-1, 0, i), up = gate_up.narrow(-1, i, i);
  } else {
    gate = gate_proj->forward(x), up = up_proj->forward(x);
    if (x.is_cuda()) return down_proj->forward(kernels::gated_activation(gate, up, act));
  }
  return down_proj->forward(kernels::gated_reference(gate, up, act));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& c, const torch::TensorOptions& opts,
                                   int64_t index) {
  self_attn = register_module("self_attn", Attention(c, opts));
  if (c.is_sparse(index))
    moe = register_module("mlp", std::make_shared<SparseMoeImpl>(c, opts));
  else
    mlp = register_module("mlp", MLP(c, opts));
  auto norm = [&](const char* name) {
    return register_module(name,
                           RMSNorm(c.hidden_size, c.rms_norm_eps, opts, c.family->norm_weight));
  };
  input_layernorm = norm("input_layernorm");
  post_attention_layernorm = norm("post_attention_layernorm");
  if (c.family->sandwich_norms) {
    pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
    post_feedforward_layernorm = norm("post_feedforward_layernorm");
  }
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionInputs& in) {
  auto feed_forward = [&](const torch::Tensor& h) {
    return moe ? moe->forward(h) : mlp->forward(h);
  };
  if (!pre_feedforward_layernorm) {  // Llama's layout: a norm before each half
    torch::Tensor h = x + self_attn->forward(input_layernorm->forward(x), in);
    return h + feed_forward(post_attention_layernorm->forward(h));
  }
  // Gemma's: a norm before and after each half, the residual sums outside them. The norm after
  // the MLP reads its output, in a checkpointed layer's recompute too.
  torch::Tensor h =
      x + post_attention_layernorm->forward(self_attn->forward(input_layernorm->forward(x), in));
  torch::Tensor mlp_out;
  {
    MlpOutputRead read;
    mlp_out = feed_forward(pre_feedforward_layernorm->forward(h));
  }
  return h + post_feedforward_layernorm->forward(mlp_out);
}

}  // namespace kubetune::model
