#include "trainer/plan/preflight.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/contracts.h"
#include "common/log.h"
#include "common/preference_refusals.h"
#include "trainer/data/dataset.h"
#include "trainer/data/sampler.h"
#include "trainer/device/device.h"
#include "trainer/inputs/run_inputs.h"
#include "trainer/inputs/user_input_error.h"
#include "trainer/model/lora.h"
#include "trainer/plan/batch_shape.h"
#include "trainer/plan/flops.h"
#include "trainer/plan/host_memory.h"
#include "trainer/plan/kto_weights.h"
#include "trainer/plan/memory_model.h"
#include "trainer/plan/micro_batch.h"

namespace kubetune::train {
namespace {

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

// `unpaired`: kto's examples, whose desirable ones are counted.
api::DatasetReport data_report(const std::string& path, const data::DatasetScan& scan,
                               int max_length, int listed, bool unpaired) {
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
  if (!scan.mapped.empty()) d.mapped = scan.mapped;
  if (unpaired) {
    int64_t desirable = 0;
    for (const auto& e : scan.examples) desirable += e.desirable ? 1 : 0;
    d.desirable_records = desirable;
  }
  return d;
}

}  // namespace

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
    check_weights_fit_method(model, c.model.path, c.method.type == api::MethodType::kQlora);
    if (c.method.type != api::MethodType::kFull) {
      try {
        model::check_lora_targets(model, lora_target_modules(c.method.lora));
      } catch (const std::exception& e) {
        throw std::runtime_error("method.lora.targetModules: " + std::string(e.what()));
      }
    }
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
  const bool unpaired = options.preference == data::Format::kUnpairedPreference;
  r.data.train =
      data_report(c.data.train, train, c.data.max_length, o.invalid_lines_listed, unpaired);
  if (const auto advice = kto_weight_advice(train, c.training.preference); advice && unpaired)
    log::warn() << *advice;
  size_t invalid = train.invalid.size();
  std::string first_invalid = train.invalid.empty() ? "" : train.invalid.front().error;
  if (c.data.validation) {
    const auto validation =
        data::scan_jsonl(*c.data.validation, text->tokenizer, text->chat.get(), options);
    r.data.validation = data_report(*c.data.validation, validation, c.data.max_length,
                                    o.invalid_lines_listed, unpaired);
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
    if (unpaired && shape.global_batch < 2) throw UserInputError(kKtoNeedsTwoExamplesPerStep);
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
  r.memory.micro_batch_tokens = micro_batch_size(c) * sequences_per_example(c) * c.data.max_length;
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
