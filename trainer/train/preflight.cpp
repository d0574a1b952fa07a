#include "trainer/train/preflight.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "common/contracts.h"
#include "trainer/data/dataset.h"
#include "trainer/data/sampler.h"
#include "trainer/model/frozen_linear_group.h"
#include "trainer/model/lora.h"
#include "trainer/train/batch_shape.h"
#include "trainer/train/device.h"
#include "trainer/train/flops.h"
#include "trainer/train/host_memory.h"
#include "trainer/train/micro_batch.h"
#include "trainer/train/model_setup.h"
#include "trainer/train/train_loop.h"

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

// Bytes of the decoder layers' inputs kept on the GPU for the recompute (0 without it). Offloaded,
// those on the GPU are the last layer's and the one being fetched.
double checkpoints(const TrainConfig& c, const model::ModelConfig& m, double tokens) {
  if (!recomputes_layers(c)) return 0;
  const int64_t on_gpu = c.model.offload_checkpoints ? 2 : m.num_hidden_layers;
  return tokens * checkpoint_element_bytes(c) * static_cast<double>(m.hidden_size * on_gpu);
}

// Model FLOPs utilisation this build reached on an H200 (bench/README.md, session 6, seq 2048):
// 39-50% without recompute (1B LoRA 39%, 1B full 41%, 8B LoRA 50%), about a quarter less with it.
constexpr double kMeasuredMfu = 0.40;
constexpr double kMeasuredMfuRecompute = 0.30;

// Time per optimizer step on an H100/H200: each GPU's share of a step's tokens at the measured MFU.
api::TimeEstimate time_estimate(const model::ModelConfig& m, const TrainConfig& c,
                                const data::DatasetScan& train, int64_t steps_per_epoch,
                                int64_t total_steps, int world_size) {
  const double tokens_per_gpu =
      static_cast<double>(train.tokens) / std::max<int64_t>(1, steps_per_epoch) / world_size;
  const double mfu = recomputes_layers(c) ? kMeasuredMfuRecompute : kMeasuredMfu;
  const double seconds =
      tokens_per_gpu * executed_flops_per_token(c, m) / (kPeakBf16FlopsPerSecond * mfu);
  api::TimeEstimate t;
  t.seconds_per_step = std::round(seconds * 1000) / 1000;
  t.total_seconds = std::round(seconds * static_cast<double>(total_steps));
  t.assumes = "H100/H200 GPUs at the model FLOPs utilisation this build measured (" +
              std::to_string(static_cast<int>(mfu * 100)) + "%, bench/README.md)";
  return t;
}

struct LinearShape {
  const char* module;  // as named in the model: "self_attn.q_proj"
  int64_t in, out;
};

std::array<LinearShape, 7> decoder_linears(const model::ModelConfig& m) {
  const int64_t h = m.hidden_size, q = m.num_attention_heads * m.head_dim,
                kv = m.num_key_value_heads * m.head_dim, i = m.intermediate_size;
  return {{{"self_attn.q_proj", h, q},
           {"self_attn.k_proj", h, kv},
           {"self_attn.v_proj", h, kv},
           {"self_attn.o_proj", q, h},
           {"mlp.gate_proj", h, i},
           {"mlp.up_proj", h, i},
           {"mlp.down_proj", i, h}}};
}

api::DatasetReport data_report(const std::string& path, const data::DatasetScan& scan,
                               int max_length, int listed) {
  api::DatasetReport d;
  d.file = path;
  d.records = static_cast<int64_t>(scan.examples.size());
  d.tokens = scan.tokens;
  d.targets = scan.targets;
  d.invalid_records = static_cast<int64_t>(scan.invalid.size());
  for (size_t i = 0; i < scan.invalid.size() && static_cast<int>(i) < listed; ++i) {
    api::InvalidLine line;
    line.line = static_cast<int64_t>(scan.invalid[i].line);
    line.error = scan.invalid[i].error;
    d.invalid_lines.push_back(line);
  }
  d.truncated_records = static_cast<int64_t>(scan.truncated.size());
  for (size_t i = 0; i < scan.truncated.size() && static_cast<int>(i) < listed; ++i)
    d.truncated_lines.push_back(static_cast<int64_t>(scan.truncated[i]));
  d.truncated_to = max_length;
  return d;
}

}  // namespace

int64_t MemoryEstimate::total() const {
  return frozen_weights + trainable_weights + gradients + optimizer_states + autocast_copies +
         activations;
}

api::MemoryReport MemoryEstimate::to_report() const {
  api::MemoryReport m;
  m.frozen_weights_gib = rounded_gib(frozen_weights);
  m.trainable_weights_gib = rounded_gib(trainable_weights);
  m.gradients_gib = rounded_gib(gradients);
  m.optimizer_states_gib = rounded_gib(optimizer_states);
  m.autocast_copies_gib = rounded_gib(autocast_copies);
  m.activations_gib = rounded_gib(activations);
  m.total_gib = rounded_gib(total());
  return m;
}

std::vector<api::ShardingEstimate> estimates_by_sharding(const model::ModelConfig& m,
                                                         const TrainConfig& configured,
                                                         int world_size,
                                                         std::optional<double> gpu_memory_gib) {
  std::vector<std::pair<api::DistributedSharding, int>> cases = {
      {api::DistributedSharding::kNone, 1}};
  std::vector<int> counts = {2, 4, 8, 16, 32, 64};
  if (world_size > 1 && std::find(counts.begin(), counts.end(), world_size) == counts.end())
    counts.insert(std::upper_bound(counts.begin(), counts.end(), world_size), world_size);
  for (int n : counts) {
    cases.emplace_back(api::DistributedSharding::kOptimizer, n);
    cases.emplace_back(api::DistributedSharding::kFull, n);
  }
  std::vector<api::ShardingEstimate> out;
  for (const auto& [sharding, n] : cases) {
    if (sharding == api::DistributedSharding::kFull &&
        configured.method.type == api::MethodType::kQlora)
      continue;
    TrainConfig c = configured;
    c.distributed.sharding = sharding;
    const int64_t bytes = estimate_gpu_memory(m, c, n).total();
    api::ShardingEstimate e;
    e.sharding = api::to_string(sharding);
    e.processes = n;
    e.total_gib = rounded_gib(bytes);
    if (gpu_memory_gib) e.fits = bytes <= *gpu_memory_gib * kGiB;
    out.push_back(e);
  }
  return out;
}

int64_t trainable_parameters(const model::ModelConfig& m, const TrainConfig& c) {
  if (c.method.type == api::MethodType::kFull) return m.num_parameters();
  int64_t n = 0;
  for (int64_t layer = 0; layer < m.num_hidden_layers; ++layer) {
    for (const auto& linear : decoder_linears(m)) {
      const std::string name =
          "model.layers." + std::to_string(layer) + "." + std::string(linear.module);
      const auto& targets = lora_target_modules(c.method.lora);
      if (std::any_of(targets.begin(), targets.end(),
                      [&](const std::string& t) { return model::matches_target(name, t); }))
        n += c.method.lora.r * (linear.in + linear.out);
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
  return static_cast<double>(m.num_parameters() - m.num_hidden_layers * m.parameters_per_layer());
}

double sharded_elements(const model::ModelConfig& m, double n, int world_size) {
  if (world_size == 1) return n;
  return n / world_size + root_elements(m) +
         std::min<double>(2, m.num_hidden_layers) * m.parameters_per_layer();
}

// The largest unit of a fully sharded model: its gradients and their flat copy meet while it is
// reduced.
double largest_unit(const model::ModelConfig& m) {
  return std::max(static_cast<double>(m.parameters_per_layer()), root_elements(m));
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
  // Frozen weights are stored in the compute dtype; trainable ones in fp32 (model_setup.cpp).
  e.frozen_weights = full ? 0 : all * (bf16 ? 2 : 4);
  if (weights_sharded && !full)
    e.frozen_weights = static_cast<int64_t>(sharded_elements(m, all, world_size) * (bf16 ? 2 : 4));
  int64_t linear = 0;  // the decoder layers' linear weights
  for (const auto& l : decoder_linears(m)) linear += l.in * l.out;
  linear *= m.num_hidden_layers;
  const bool fp8 = c.model.precision == api::ModelPrecision::kFp8;
  // model.precision fp8 changes nothing here: lora's frozen decoder linears take one byte each,
  // kept twice (W, and W^T for the input gradients: fp8_linear.h), as bf16's two (their row
  // scales, 4 bytes per few thousand weights, are left out).
  if (c.method.type == api::MethodType::kQlora) {
    // The decoder's linear weights in 4 bits plus one scale per block (a float32, or a byte and
    // 1/256 of a float32 with double quantization); the rest stays in the compute dtype.
    const double scale_bytes = c.method.quantization.double_quant ? 1.0 + 4.0 / 256 : 4.0;
    e.frozen_weights =
        static_cast<int64_t>((all - linear) * (bf16 ? 2 : 4) +
                             linear * (0.5 + scale_bytes / c.method.quantization.block_size));
  }
  e.trainable_weights = trainable * 4;
  // Several processes: the reduction's buckets hold another copy of the gradients.
  e.gradients = trainable * 4 * (world_size > 1 ? 2 : 1);
  e.optimizer_states = trainable * 8 / (optimizer_sharded ? world_size : 1);
  if (weights_sharded && full) {
    // 1/N of the gradients (summed over micro-batches) and, with peers, while one unit is
    // reduced its full-size gradients and their flat copy. One process keeps one full-size copy,
    // as without sharding (measured: the same peak, bench/README.md "Fully sharded").
    e.trainable_weights = static_cast<int64_t>(sharded_elements(m, all, world_size) * 4);
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
  const int64_t tokens = micro_batch_size(c) * c.data.max_length;
  const bool mlp_output_recomputed = trains_adapters(c) && c.method.lora.dropout == 0;
  // Under recompute that MLP node runs over chunks of a long sequence's tokens, keeping only its
  // input: its intermediate-width tensors are then one chunk's, in the layer whose backward runs.
  const int64_t mlp_chunk = mlp_output_recomputed && recomputes_layers(c)
                                ? model::swiglu_mlp_chunk_rows(tokens, m.intermediate_size)
                                : 0;
  const double scale = bf16 ? 1.0 : 2.0;  // fp32 activations take twice the bytes
  const auto n = static_cast<double>(tokens);
  if (mlp_chunk > 0) {
    const double working_set = static_cast<double>(mlp_chunk) * scale *
                               kMlpChunkBytesPerIntermediate * m.intermediate_size;
    const double per_token = kChunkedRecomputeBytesPerHidden * m.hidden_size;
    e.activations =
        static_cast<int64_t>(n * scale * per_token + working_set + checkpoints(c, m, n));
    return e;
  }
  const double per_layer =
      kActivationBytesPerHidden * m.hidden_size +
      (kActivationBytesPerIntermediate - (mlp_output_recomputed ? kRecomputedMlpOutputBytes : 0)) *
          m.intermediate_size;
  if (!recomputes_layers(c)) {
    e.activations = static_cast<int64_t>(n * scale * per_layer * m.num_hidden_layers);
    return e;
  }
  e.activations = static_cast<int64_t>(
      checkpoints(c, m, n) +
      n * scale * (per_layer + kRecomputeBackwardBytesPerIntermediate * m.intermediate_size));
  return e;
}

std::string compact_report(const nlohmann::json& report, size_t max_bytes) {
  auto cut = [](nlohmann::json& text, size_t n) {
    if (text.is_string() && text.get<std::string>().size() > n) {
      text = text.get<std::string>().substr(0, n) + "...";
    }
  };
  // Fewer listed lines and shorter texts at each try; the counts (invalidRecords) stay.
  for (size_t listed : {5, 3, 1, 0}) {
    nlohmann::json r = report;
    if (r.contains("message")) cut(r["message"], 1000);
    if (r.contains("data") && r["data"].is_object()) {
      for (auto& data : r["data"]) {
        for (const char* list : {"invalidLines", "truncatedLines"}) {
          if (!data.contains(list) || !data[list].is_array()) continue;
          auto& lines = data[list];
          if (lines.size() > listed) lines.erase(lines.begin() + listed, lines.end());
          for (auto& line : lines) {
            if (line.is_object()) cut(line["error"], 300);
          }
        }
      }
    }
    const std::string text = r.dump();
    if (text.size() <= max_bytes) return text;
  }
  nlohmann::json minimal = {{"verdict", report.value("verdict", "")}};
  if (report.contains("message")) minimal["message"] = report["message"];
  cut(minimal["message"], max_bytes / 2);
  return minimal.dump();
}

// What would fit, from the estimates by sharding mode (the fewest processes first, the optimizer
// alone before the weights too, as it communicates less).
std::string sharding_advice(const std::vector<api::ShardingEstimate>& estimates) {
  std::string text =
      "try model.gradientCheckpointing, a smaller training.microBatchSize or data.maxLength, "
      "LoRA";
  for (const auto& e : estimates) {
    if (!e.fits.value_or(false) || !e.processes || !e.sharding) continue;
    char fit[160];
    std::snprintf(fit, sizeof fit,
                  "; it fits with distributed.sharding %s across >= %lld GPUs (%.1f GiB each)",
                  e.sharding->c_str(), static_cast<long long>(*e.processes),
                  e.total_gib.value_or(0));
    return text + fit;
  }
  return text + "; no distributed.sharding up to 64 GPUs makes it fit";
}

PreflightReport preflight(const TrainConfig& configured, const PreflightOptions& o) {
  TrainConfig c = configured;  // with training.microBatchSize auto resolved, below
  model::ModelConfig model;
  std::optional<TextTools> text;
  try {
    model = model::ModelConfig::from_dir(c.model.path);
    check_checkpoint_fits_method(model, c.model.path, c.method.type == api::MethodType::kQlora);
    text = load_text_tools(c.model.path);
  } catch (const std::exception& e) {
    throw UserInputError(e.what());
  }
  // training.microBatchSize auto: chosen here as a worker on this GPU would (micro_batch.h).
  std::optional<int64_t> gpu_bytes;
  if (o.gpu_memory_gib) gpu_bytes = static_cast<int64_t>(*o.gpu_memory_gib * kGiB);
  const MicroBatchChoice micro_batch = resolve_micro_batch(
      c, model, o.world_size, configured_global_batch(configured, o.world_size, 0), gpu_bytes);
  const auto options = dataset_options(c);
  const data::DatasetScan train =
      data::scan_jsonl(c.data.train, text->tokenizer, text->chat.get(), options);
  PreflightReport out;
  api::PreflightReport& r = out.report;
  r.data.train = data_report(c.data.train, train, c.data.max_length, o.invalid_lines_listed);
  size_t invalid = train.invalid.size();
  std::string first_invalid = train.invalid.empty() ? "" : train.invalid.front().error;
  if (c.data.validation) {
    const auto validation =
        data::scan_jsonl(*c.data.validation, text->tokenizer, text->chat.get(), options);
    r.data.validation =
        data_report(*c.data.validation, validation, c.data.max_length, o.invalid_lines_listed);
    invalid += validation.invalid.size();
    if (first_invalid.empty() && !validation.invalid.empty())
      first_invalid = validation.invalid.front().error;
  }

  r.model.path = c.model.path;
  r.model.model_type = model.model_type;
  r.model.layers = model.num_hidden_layers;
  r.model.hidden_size = model.hidden_size;
  r.model.parameters = model.num_parameters();
  r.model.method = api::to_string(c.method.type);
  r.model.trainable_parameters = trainable_parameters(model, c);
  if (!train.examples.empty()) {
    const BatchShape shape = batch_shape(c, o.world_size, 0);
    data::DistributedSampler sampler(train.examples.size(), shape.global_batch,
                                     static_cast<int>(shape.accumulation), 0, o.world_size,
                                     c.training.seed, c.data.shuffle);
    const int64_t total = total_steps(c, sampler.steps_per_epoch());
    r.steps.world_size = o.world_size;
    r.steps.global_batch = shape.global_batch;
    r.steps.per_epoch = sampler.steps_per_epoch();
    r.steps.total = total;
    r.time = time_estimate(model, c, train, sampler.steps_per_epoch(), total, o.world_size);
  }
  const MemoryEstimate memory = estimate_gpu_memory(model, c, o.world_size);
  r.memory = memory.to_report();
  r.memory.micro_batch_tokens = micro_batch_size(c) * c.data.max_length;
  r.memory.gradient_checkpointing = recomputes_layers(c);
  r.memory.offload_checkpoints = c.model.offload_checkpoints;
  r.memory.gpu_memory_gib = o.gpu_memory_gib;
  r.memory.sharding = api::to_string(c.distributed.sharding);
  r.memory.by_sharding_mode = estimates_by_sharding(model, c, o.world_size, o.gpu_memory_gib);
  r.micro_batch = micro_batch.to_report();

  if (invalid > 0 || train.examples.empty()) {
    out.verdict = api::PreflightVerdict::kDatasetInvalid;
    r.message = train.examples.empty() && invalid == 0
                    ? c.data.train + ": no records"
                    : std::to_string(invalid) + " invalid record(s); first: " + first_invalid;
  } else if (o.gpu_memory_gib && memory.total() > *o.gpu_memory_gib * kGiB) {
    out.verdict = api::PreflightVerdict::kDoesNotFit;
    char text_gib[64];
    std::snprintf(text_gib, sizeof text_gib, "%.1f GiB per GPU, more than the GPU's %.1f GiB",
                  memory.total() / kGiB, *o.gpu_memory_gib);
    r.message = std::string("estimated peak memory ") + text_gib + "; " +
                sharding_advice(r.memory.by_sharding_mode);
  }
  r.verdict = out.verdict.value_or(api::PreflightVerdict::kOK);
  return out;
}

}  // namespace kubetune::train
