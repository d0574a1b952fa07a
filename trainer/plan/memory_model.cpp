#include "trainer/plan/memory_model.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "trainer/device/device.h"
#include "trainer/model/frozen_linear_group.h"
#include "trainer/model/lora.h"
#include "trainer/plan/host_memory.h"
#include "trainer/plan/micro_batch.h"

namespace kubetune::train {
namespace {

// Bytes saved for backward per token and decoder layer, per element of the hidden and of the
// MLP's intermediate width: a least-squares-free fit (two equations, two unknowns) to the peaks
// of LoRA on Llama-3.2-1B (micro-batch 4) and Llama-3.1-8B (micro-batch 2) at 2048 tokens,
// checked against full fine-tuning of the 1B (bench/README.md, "Memory"). bf16 activations:
// about 3.5 saved tensors of the hidden width and 4 of the intermediate one.
constexpr double kActivationBytesPerHidden = 6.98;
constexpr double kActivationBytesPerIntermediate = 8.35;
// LoRA and QLoRA without dropout on a GPU run the MLP as one node that recomputes SwiGLU's output
// in backward (trainer/model/frozen_linear_group.h): one bf16 value of the intermediate width less.
// Measured since: LoRA 10.87 GiB (1B) and 30.19 GiB (8B) against 10.59 and 30.26 estimated;
// QLoRA 9.55 (1B), 20.57 (8B) and 73.6 GiB (70B, micro-batch 1) against 9.24, 20.6 and 76.8.
constexpr double kRecomputedMlpOutputBytes = 2.0;
// With gradient checkpointing a layer keeps only its input until its backward recomputes it (one
// value of the hidden width: bf16 between frozen bf16 layers, fp32 when the weights are fp32, as
// full fine-tuning trains them). The layer being recomputed then holds its activations and, at
// the peak of its MLP's backward, about four more bf16 values of the intermediate width (the
// gradients of the SwiGLU's output, gate and up, and the recomputed output). Fitted to the peaks
// of 1B LoRA at 8192 tokens (recompute on: 3.98 GiB; offloaded: 3.58) and of 8B LoRA offloaded at
// 65536 and 131072 tokens (30.94 and 46.25 GiB); the estimate was 3.98, 3.10, 24.88 and 34.19
// when it counted fp32 checkpoints and no backward working set, and is now 3.98, 3.54, 30.88 and
// 46.19 (bench/README.md, "Memory").
constexpr double kRecomputeBackwardBytesPerIntermediate = 8.0;

// With the MLP over chunks of tokens (long sequences, frozen_linear_group.h) and recompute, what
// the layer whose backward runs, and everything outside the layers, holds per token and element of
// the hidden width, beside the checkpoints; and the MLP's working set per element of one chunk's
// [tokens, intermediate]. Fitted to 8B LoRA r16 at 65536 tokens and 8B QLoRA r32 at 393216, with
// offloaded checkpoints (23.93 and 51.97 GiB on an H100, session 18); the two runs at 131072
// between them, LoRA and QLoRA (30.75 and 21.73 GiB), are estimated 1.9% and 2.7% above.
constexpr double kChunkedRecomputeBytesPerHidden = 25.65;
constexpr double kMlpChunkBytesPerIntermediate = 3.77;

// What the families beyond Llama's layout keep besides, per token and decoder layer (bf16; the
// fitted constants above are Llama's): q/k norms keep q and k before the norm (Qwen3, Gemma 3),
// sandwich norms keep the inputs of the two norms Llama lacks (Gemma 3). Checked against the peaks
// of Qwen3-8B LoRA and QLoRA, Gemma-3-12B LoRA on an H100 (bench/README.md, "Model families"):
// estimated -1.4%, -2.0% and -3.4% with this term, -5.7% to -17% without. Phi-4 QLoRA, its MLP one
// node since session 35 (H200): -3.3% on all 40 layers and -5.7% on 20 (-5.8% under FP8), the same
// 1.1 GiB short in each (outside the decoder layers: their slope is right).
double family_activation_bytes(const model::ModelConfig& m) {
  const double q = static_cast<double>(m.num_attention_heads * m.head_dim),
               kv = static_cast<double>(m.num_key_value_heads * m.head_dim);
  double bytes = 0;
  if (m.family->qk_norm) bytes += 2.0 * (q + kv);
  if (m.family->sandwich_norms) bytes += 2.0 * 2.0 * static_cast<double>(m.hidden_size);
  // A sparse layer keeps its input gathered once per routed expert (bf16 [k, hidden] per token)
  // and the router's fp32 probabilities and logits; its experts' intermediate tensors are the
  // intermediate-width term's, at width k x the experts' (mlp_width). Checked against Qwen3-30B-A3B
  // (24 of its layers) LoRA and QLoRA on an H100
  // (bench/results/h100-session26-moe-vs-unsloth.jsonl).
  if (m.family->has_experts())
    bytes += 2.0 * static_cast<double>(m.experts_per_token * m.hidden_size) +
             2.0 * 4.0 * static_cast<double>(m.num_experts);
  return bytes;
}

// The MLP's intermediate width per token: a mixture of experts runs each token through
// experts_per_token experts of their own width.
int64_t mlp_width(const model::ModelConfig& m) {
  if (!m.family->has_experts()) return m.intermediate_size;
  return m.experts_per_token * m.expert_intermediate_size;
}

// Bytes of the decoder layers' inputs kept on the GPU for the recompute (0 without it). Offloaded,
// those on the GPU are the last layer's and the one being fetched.
double recompute_inputs(const TrainConfig& c, const model::ModelConfig& m, double tokens) {
  if (!recomputes_layers(c)) return 0;
  const int64_t on_gpu = c.model.offload_checkpoints ? 2 : m.num_hidden_layers;
  return tokens * recompute_input_element_bytes(c) * static_cast<double>(m.hidden_size * on_gpu);
}

}  // namespace

int64_t MemoryEstimate::total() const {
  return std::max(loading, frozen_weights + trainable_weights + gradients + optimizer_states +
                               autocast_copies + activations);
}

api::MemoryReport MemoryEstimate::to_report() const {
  api::MemoryReport m;
  m.frozen_weights_gib = rounded_gib(frozen_weights);
  m.trainable_weights_gib = rounded_gib(trainable_weights);
  m.gradients_gib = rounded_gib(gradients);
  m.optimizer_states_gib = rounded_gib(optimizer_states);
  m.autocast_copies_gib = rounded_gib(autocast_copies);
  m.activations_gib = rounded_gib(activations);
  if (loading > 0) m.loading_gib = rounded_gib(loading);
  m.total_gib = rounded_gib(total());
  return m;
}

int64_t trainable_parameters(const model::ModelConfig& m, const TrainConfig& c) {
  if (c.method.type == api::MethodType::kFull) return m.num_parameters();
  // The targets as apply_lora resolves them (a mixture of experts' names onto its stacks).
  model::LoraConfig requested;
  requested.r = c.method.lora.r;
  requested.alpha = c.method.lora.alpha;
  requested.target_modules = lora_target_modules(c.method.lora);
  const model::LoraConfig lora = model::resolved_for(requested, m);
  auto any_matches = [](const std::string& name, const std::vector<std::string>& targets) {
    return std::any_of(targets.begin(), targets.end(),
                       [&](const std::string& t) { return model::matches_target(name, t); });
  };
  int64_t n = 0;
  for (int64_t layer = 0; layer < m.num_hidden_layers; ++layer) {
    for (const auto& linear : m.decoder_linears(layer)) {
      const std::string name = "model.layers." + std::to_string(layer) + "." + linear.module;
      const bool adapted =
          linear.experts > 0
              ? any_matches(name, lora.target_parameters.value_or(std::vector<std::string>{}))
              : (lora.target_modules.empty() && !lora.target_parameters) ||
                    any_matches(name, lora.target_modules);
      if (adapted)
        n += static_cast<int64_t>(lora.rank_of(linear.module)) * (linear.in + linear.out) *
             std::max<int64_t>(1, linear.experts);
    }
  }
  return n;
}

// Fully sharded weights (full_sharding.h) of `n` elements in total, as present at the peak: this
// process's 1/N of each unit, and what is gathered at once, the root (embedding, final norm,
// output layer: from the embedding to the end of backward) and two decoder layers (the one
// running and the one arriving). One process holds everything once.
// The root unit: embedding, final norm, untied output layer.
double root_elements(const model::ModelConfig& m) {
  int64_t layers = 0;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) layers += m.parameters_of_layer(l);
  return static_cast<double>(m.num_parameters() - layers);
}

double sharded_elements(const model::ModelConfig& m, double n, int world_size) {
  if (world_size == 1) return n;
  return n / world_size + root_elements(m) +
         std::min<double>(2, m.num_hidden_layers) * m.largest_layer_parameters();
}

// The bytes of full fine-tuning's fully sharded fp32 weights: as sharded_elements, but with peers
// and bf16 products a gathered layer's matrices are bf16 (full_sharding.h), 2 bytes where the
// rest take 4.
double sharded_trainable_bytes(const model::ModelConfig& m, int world_size, bool bf16_products) {
  const double all = static_cast<double>(m.num_parameters());
  if (world_size == 1 || !bf16_products) return sharded_elements(m, all, world_size) * 4;
  double layer = 0;  // the largest gathered layer, in bytes
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    int64_t matrices = 0;
    for (const auto& linear : m.decoder_linears(l)) matrices += linear.weights();
    layer = std::max(layer, 4.0 * m.parameters_of_layer(l) - 2.0 * matrices);
  }
  return (all / world_size + root_elements(m)) * 4 +
         std::min<double>(2, m.num_hidden_layers) * layer;
}

// The largest unit of a fully sharded model: its gradients and their flat copy meet while it is
// reduced.
double largest_unit(const model::ModelConfig& m) {
  return std::max(static_cast<double>(m.largest_layer_parameters()), root_elements(m));
}

MemoryEstimate estimate_gpu_memory(const model::ModelConfig& m, const TrainConfig& c,
                                   int world_size) {
  MemoryEstimate e;
  const int64_t all = m.num_parameters(), trainable = trainable_parameters(m, c);
  const bool full = c.method.type == api::MethodType::kFull,
             bf16 = c.model.dtype != api::ModelDtype::kFloat32;
  const bool weights_sharded = c.distributed.sharding == api::DistributedSharding::kFull,
             optimizer_sharded =
                 c.distributed.sharding != api::DistributedSharding::kNone && world_size > 1;
  // Frozen weights are stored in the compute dtype; trainable ones in fp32
  // (trainer/inputs/run_inputs.cpp).
  e.frozen_weights = full ? 0 : all * (bf16 ? 2 : 4);
  if (weights_sharded && !full)
    e.frozen_weights = static_cast<int64_t>(sharded_elements(m, all, world_size) * (bf16 ? 2 : 4));
  int64_t linear = 0;  // the decoder layers' linear weights (experts included)
  for (int64_t layer = 0; layer < m.num_hidden_layers; ++layer)
    for (const auto& l : m.decoder_linears(layer)) linear += l.weights();
  const bool fp8 = c.model.precision == api::ModelPrecision::kFp8;
  // Full fine-tuning's matrices gathered in bf16 (full_sharding.h), on GPUs as everything here.
  const torch::Device gpu(torch::kCUDA);
  const bool bf16_products =
      gathered_products_dtype(c, world_size, autocast_dtype(gpu, compute_dtype(c.model.dtype, gpu)))
          .has_value();
  // model.precision fp8 changes nothing here: lora's frozen decoder linears take one byte each,
  // kept twice (W, and W^T for the input gradients: fp8_linear.h), as bf16's two (their row
  // scales, 4 bytes per few thousand weights, are left out).
  int64_t quantized_whole = 0;  // QLoRA's base, unsplit
  if (c.method.type == api::MethodType::kQlora) {
    // The decoder's linear weights in 4 bits plus one scale per block (a float32, or a byte and
    // 1/256 of a float32 with double quantization); the rest stays in the compute dtype.
    const double scale_bytes = c.method.quantization.double_quant ? 1.0 + 4.0 / 256 : 4.0;
    quantized_whole =
        static_cast<int64_t>((all - linear) * (bf16 ? 2 : 4) +
                             linear * (0.5 + scale_bytes / c.method.quantization.block_size));
    e.frozen_weights = quantized_whole;
    if (weights_sharded && world_size > 1) {
      // 1/N of it, and gathered whole: the root, which is not quantized (embedding and output
      // layer in the compute dtype), and two decoder layers in their 4-bit form. (Scaling the
      // bf16 split by the 4-bit share counted the root at 4 bits: 2.4 GiB short for 70B.)
      const double root_bytes = root_elements(m) * (bf16 ? 2 : 4);
      const double layer_bytes = (static_cast<double>(quantized_whole) - root_bytes) /
                                 std::max<int64_t>(1, m.num_hidden_layers);
      e.frozen_weights =
          static_cast<int64_t>(static_cast<double>(quantized_whole) / world_size + root_bytes +
                               std::min<double>(2, m.num_hidden_layers) * layer_bytes);
    }
  }
  e.trainable_weights = trainable * 4;
  // Several processes: the reduction's buckets hold another copy of the gradients.
  e.gradients = trainable * 4 * (world_size > 1 ? 2 : 1);
  e.optimizer_states = trainable * 8 / (optimizer_sharded ? world_size : 1);
  if (weights_sharded && world_size > 1) {
    // Each decoder layer is split as soon as it has loaded (full_sharding.h: take_part): the
    // slices so far, the embedding, and the layer whole twice (as loaded, and the flat buffer it
    // is moved into); at the end the root whole twice the same way, beside every slice.
    // QLoRA's layers are quantized before they are split: its base's share of the slices.
    const double bytes = full ? 4 : (bf16 ? 2 : 4);
    const double root = root_elements(m), layer = m.largest_layer_parameters();
    const double slices = c.method.type == api::MethodType::kQlora
                              ? static_cast<double>(quantized_whole) / world_size
                              : static_cast<double>(all) / world_size * bytes;
    e.loading = static_cast<int64_t>(slices + std::max(root + 2 * layer, 2 * root) * bytes);
  }
  if (weights_sharded && full) {
    // 1/N of the gradients (summed over micro-batches) and, with peers, while one unit is
    // reduced its full-size gradients and their flat copy. One process keeps one full-size copy,
    // as without sharding (measured: the same peak, bench/README.md "Fully sharded").
    e.trainable_weights =
        static_cast<int64_t>(sharded_trainable_bytes(m, world_size, bf16_products));
    e.gradients = static_cast<int64_t>(
        (static_cast<double>(all) / world_size + (world_size > 1 ? 2 * largest_unit(m) : 0)) * 4);
    e.optimizer_states = all * 8 / world_size;
  } else if (weights_sharded) {
    e.optimizer_states = trainable * 8;  // the adapters stay whole on every process
  }
  // Measured: with checkpointing the forward keeps no cast copies (22.4 GiB estimated with
  // them against 19.6 GiB measured for the 1B's full fine-tuning).
  e.autocast_copies = bf16 && !recomputes_layers(c) ? trainable * 2 : 0;
  // Under fp8 full fine-tuning backward keeps each decoder linear weight in FP8 (one byte) where
  // autocast kept a bf16 copy.
  if (fp8 && full && e.autocast_copies > 0) e.autocast_copies = (trainable - linear) * 2 + linear;
  // Fully sharded with peers, the matrices are gathered in bf16 (full_sharding.h): backward keeps
  // the gathered parameter, whose storage is freed between forward and backward, not a cast copy.
  if (bf16_products && e.autocast_copies > 0) e.autocast_copies = (trainable - linear) * 2;
  const int64_t tokens = micro_batch_size(c) * sequences_per_example(c) * c.data.max_length;
  // Whether the MLP runs as one node (frozen_linear_group.h).
  const bool mlp_grouped =
      !m.family->has_experts() &&
      model::mlp_node_computes(
          m.gelu_tanh ? kernels::GateActivation::kGeluTanh : kernels::GateActivation::kSilu, fp8);
  const bool mlp_output_recomputed =
      trains_adapters(c) && c.method.lora.dropout == 0 && mlp_grouped;
  // Under recompute that MLP node runs over chunks of a long sequence's tokens, keeping only its
  // input: its intermediate-width tensors are then one chunk's, in the layer whose backward runs.
  // Not in Gemma's layers, whose recompute computes the MLP's output for the norm after it.
  const int64_t mlp_chunk =
      mlp_output_recomputed && recomputes_layers(c) && !m.family->sandwich_norms
          ? model::swiglu_mlp_chunk_rows(tokens, mlp_width(m))
          : 0;
  const double scale = bf16 ? 1.0 : 2.0;  // fp32 activations take twice the bytes
  const auto n = static_cast<double>(tokens);
  if (mlp_chunk > 0) {
    const double working_set =
        static_cast<double>(mlp_chunk) * scale * kMlpChunkBytesPerIntermediate * mlp_width(m);
    const double per_token = kChunkedRecomputeBytesPerHidden * m.hidden_size;
    e.activations =
        static_cast<int64_t>(n * scale * per_token + working_set + recompute_inputs(c, m, n));
    return e;
  }
  const double per_layer =
      kActivationBytesPerHidden * m.hidden_size + family_activation_bytes(m) +
      (kActivationBytesPerIntermediate - (mlp_output_recomputed ? kRecomputedMlpOutputBytes : 0)) *
          mlp_width(m);
  if (!recomputes_layers(c)) {
    e.activations = static_cast<int64_t>(n * scale * per_layer * m.num_hidden_layers);
    return e;
  }
  e.activations = static_cast<int64_t>(
      recompute_inputs(c, m, n) +
      n * scale * (per_layer + kRecomputeBackwardBytesPerIntermediate * mlp_width(m)));
  return e;
}

}  // namespace kubetune::train
