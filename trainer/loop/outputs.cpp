#include "trainer/loop/outputs.h"

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/contracts.h"
#include "common/log.h"
#include "common/source_forms.h"
#include "trainer/inputs/user_input_error.h"
#include "trainer/io/hf_checkpoint.h"
#include "trainer/io/peft_adapter.h"
#include "trainer/loop/evaluate.h"
#include "trainer/loop/preference.h"
#include "trainer/plan/micro_batch.h"

namespace fs = std::filesystem;

namespace kubetune::train {
namespace {

// This process's part of a checkpoint: the elements its optimizer updates, with their moments.
// Sharded entries are this process's own; whole ones, the same on every process, are dealt out
// between them so that all write about as much.
CheckpointPart checkpoint_part(Run& run) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (size_t i = 0; i < run.trainable.names.size(); ++i)
    shapes[run.trainable.names[i]] = run.trainable.tensors[i].sizes().vec();
  const int rank = run.comm.rank(), world = run.comm.world_size();
  CheckpointPart part;
  size_t whole = 0;
  for (const auto& e : run.optimizer.params()) {
    if (e.whole() && static_cast<int>(whole++ % world) != rank) continue;
    const auto& shape = shapes.at(e.name);
    const int64_t offset = e.whole() ? 0 : (e.named_offset < 0 ? e.offset : e.named_offset);
    part.trainable.push_back({e.name, shape, offset, e.values(e.param).reshape(-1)});
    part.optimizer.push_back({e.name + ".exp_avg", shape, offset, e.exp_avg.reshape(-1)});
    part.optimizer.push_back({e.name + ".exp_avg_sq", shape, offset, e.exp_avg_sq.reshape(-1)});
  }
  if (rank == 0)
    part.optimizer.push_back(
        {"step", {1}, 0, torch::tensor({run.optimizer.step_count()}, torch::kInt64)});
  return part;
}

// The base with the adapters merged in, written in the base's own dtype (config.json's: bf16 for
// the models people serve), the form vLLM and llama.cpp's converter read. The merge itself is done
// in full precision and rounded once. QLoRA's adapters learned against the 4-bit base, so theirs
// are merged into that base dequantized (as Unsloth's save_pretrained_merged does), not into the
// original weights. The base comes from the model folder again (rank 0 holds it, on the host); a
// randomly initialised one exists only in the run (drawn in its storage dtype, so the copy is
// exact), and its sharded values are gathered layer by layer.
void write_merged(Run& run, const std::optional<model::LoraConfig>& lora,
                  const io::ParameterValue& value_of) {
  const auto& c = run.config;
  const bool lead = run.comm.rank() == 0;
  const bool random_base = c.model.init == api::ModelInit::kRandom;
  const bool qlora = c.method.type == api::MethodType::kQlora;
  model::CausalLM merged{nullptr};
  if (lead)
    merged = load_model(c.model.path, torch::Device(torch::kCPU),
                        qlora ? run.dtype : torch::kFloat32, lora, false, c.training.seed,
                        qlora ? std::optional(c.method.quantization) : std::nullopt, c.model.init);
  torch::NoGradGuard no_grad;
  for (const auto& item : run.model->named_parameters()) {
    if (!item.value().requires_grad() && !random_base) continue;
    const torch::Tensor value = value_of(item.key(), item.value());  // every process asks
    if (lead) merged->named_parameters()[item.key()].copy_(value.to(torch::kCPU));
  }
  if (!lead) return;
  model::merge_lora(merged);
  const auto dtype = io::hf_dtype(run.model->config().torch_dtype);
  io::save_hf_model(merged, c.output.dir + "/merged", dtype);
  io::copy_tokenizer_files(c.model.path, c.output.dir + "/merged");
  log::info() << "saved merged model (" << io::hf_dtype_name(dtype) << ") output=" << c.output.dir
              << "/merged";
}

// The adapter or model folder (and the merged model), written by rank 0. Weights the processes do
// not hold whole are gathered a layer at a time as the files reach them, a collective every
// process takes part in: no process holds the whole model, on the GPU or the host.
void write_outputs(Run& run) {
  const auto& c = run.config;
  const auto lora = lora_config(c);
  const bool lead = run.comm.rank() == 0;
  const io::ParameterValue value_of = [&](const std::string& name, const torch::Tensor& t) {
    return run.weight_sync->weight_value(name, t);
  };
  if (lead) fs::create_directories(c.output.dir);
  if (lora) {
    if (lead) io::save_peft_adapter(run.model, *lora, c.model.path, c.output.dir);
    if (c.output.save_merged) write_merged(run, lora, value_of);
  } else {
    io::save_hf_model(run.model, c.output.dir, torch::kFloat32, 5'000'000'000, value_of, lead);
    if (lead) io::copy_tokenizer_files(c.model.path, c.output.dir);
  }
  run.weight_sync->after_reading_weights();
  if (lead)
    log::info() << "saved " << (lora ? "PEFT adapter" : "model") << " output=" << c.output.dir;
}

}  // namespace

// Every process writes its part at once; the waits between the moves are for file I/O, which
// may take longer than any collective may (a slow volume, a large model).
void write_checkpoint(Run& run) {
  run.weight_sync->wait_for_weights();
  const std::string dir = checkpoint_dir(run.config);
  const int64_t step = run.state.step;
  const bool lead = run.comm.rank() == 0;
  if (lead) begin_checkpoint(dir, step);
  run.comm.wait_for_peers("rank 0 preparing the checkpoint folder");
  write_checkpoint_part(dir, step, run.comm.rank(), run.comm.world_size(), checkpoint_part(run));
  run.comm.wait_for_peers("every rank writing its part of the checkpoint");
  if (lead) {
    const auto lora = lora_config(run.config);
    const auto path = publish_checkpoint(dir, run.state, [&](const std::string& tmp) {
      if (lora) io::save_peft_adapter(run.model, *lora, run.config.model.path, tmp);
    });
    prune_checkpoints(dir, run.config.checkpoint.keep_last);
    for (auto& o : run.observers) o->on_checkpoint(step, path);
  }
  run.comm.wait_for_peers("rank 0 publishing the checkpoint");
  run.checkpointed_step = step;
}

namespace {

// What a person compares before and after: pairs, how often the chosen answer is likelier; kto's
// examples, how likely the desirable and the undesirable completions are.
void log_held_out(int64_t step, const PairEvaluation& e) {
  auto line = log::info();
  if (e.kl) {
    line << "held-out examples at step=" << step << ": loss per completion token "
         << log::fixed(*e.desirable_loss, 4) << " desirable, " << log::fixed(*e.undesirable_loss, 4)
         << " undesirable, kl " << log::fixed(*e.kl, 4);
  } else {
    line << "held-out pairs at step=" << step << ": "
         << log::fixed(100 * e.preferred.value_or(0), 1)
         << "% with the chosen answer likelier per token, reward accuracy "
         << log::fixed(100 * e.accuracy.value_or(0), 1) << "%";
  }
  if (e.margin) line << ", reward margin " << log::fixed(*e.margin, 4);
  line << ", loss " << log::fixed(e.loss, 4);
}

}  // namespace

double run_validation(Run& run) {
  run.weight_sync->wait_for_weights();
  double loss = 0;
  if (run.preference) {
    const auto e = evaluate_pairs(
        pair_scoring(*run.model, run.device, run.dtype, run.comm, run.config, run.text.pad_id),
        *run.preference, run.validation, run.validation_reference);
    if (run.comm.rank() == 0) log_held_out(run.state.step, e);
    loss = e.loss;
  } else {
    loss = evaluate(*run.model, run.validation, micro_batch_size(run.config), run.text.pad_id,
                    run.device, run.dtype, &run.comm)
               .mean_loss;
  }
  run.weight_sync->after_evaluation();
  return loss;
}

void save_outputs(Run& run) {
  run.weight_sync->wait_for_weights();
  write_outputs(run);
  run.comm.wait_for_peers("rank 0 writing the outputs");
}

void begin_outputs(const TrainConfig& c, bool lead) {
  for (const auto& [field, dir] : {std::pair<std::string, std::string>{"output.dir", c.output.dir},
                                   {"checkpoint.dir", c.checkpoint.dir.value_or("")}}) {
    if (is_remote_source(dir))
      throw UserInputError(field + " " + dir +
                           ": the trainer writes a local folder; kubetune run and the operator "
                           "give it one and upload it there (kubetune-fetch publish)");
  }
  if (lead) fs::remove(fs::path(c.output.dir) / kOutputCompleteFile);
}

void mark_outputs_complete(const Run& run) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const fs::path dir(run.config.output.dir);
  const fs::path tmp = dir / (std::string(".") + kOutputCompleteFile + ".tmp");
  {
    std::ofstream out(tmp);
    out << nlohmann::json{{"host", host}, {"step", run.state.step}}.dump() << "\n";
    out.flush();
    if (!out) throw std::runtime_error(tmp.string() + ": write failed");
  }
  fs::rename(tmp, dir / kOutputCompleteFile);  // whole or absent, for the publisher that polls
}

}  // namespace kubetune::train
