#include "trainer/loop/run_setup.h"

#include <torch/torch.h>

#include <map>
#include <stdexcept>

#include "common/log.h"
#include "kernels/fp8.h"
#include "trainer/data/dataset.h"
#include "trainer/device/device.h"
#include "trainer/inputs/user_input_error.h"
#include "trainer/loop/resume_check.h"
#include "trainer/plan/host_memory.h"

namespace kubetune::train {

std::optional<model::LoraConfig> lora_config(const TrainConfig& c) {
  if (!trains_adapters(c)) return std::nullopt;
  model::LoraConfig l;
  l.r = c.method.lora.r;
  l.alpha = c.method.lora.alpha;
  // Preference objectives train without dropout, as TRL's disable_dropout (on by default) does:
  // the policy's log-probabilities must be comparable with the reference's.
  l.dropout = c.training.objective == api::TrainingObjective::kSft ? c.method.lora.dropout : 0;
  l.target_modules = lora_target_modules(c.method.lora);
  return l;
}

std::optional<model::PreferenceObjective> preference_objective(const TrainConfig& c) {
  if (c.training.objective == api::TrainingObjective::kSft) return std::nullopt;
  return model::PreferenceObjective{c.training.objective, c.training.preference};
}

namespace {

// Offloaded checkpoints that would not fit the host's memory (`processes` trainers pin theirs on
// this machine): an error now, before the model loads, not a silent kill at the first step.
void check_host_memory_for_offload(const TrainConfig& c, const torch::Device& device,
                                   int processes) {
  if (!c.model.offload_checkpoints || !device.is_cuda()) return;
  TrainConfig smallest = c;  // microBatchSize auto is chosen later, from the GPU: at least 1
  if (micro_batch_is_auto(smallest)) set_micro_batch_size(smallest, 1);
  const int64_t need =
      offloaded_recompute_input_bytes(model::ModelConfig::from_dir(c.model.path), smallest);
  const auto available = available_host_memory();
  if (!available) return;
  if (auto error = offload_host_memory_error(need, processes, *available))
    throw std::runtime_error(*error);
  log::info() << "model.offloadCheckpoints: " << (need >> 20) << " MiB of pinned host memory per "
              << "process, " << (*available >> 20) << " MiB available";
}

}  // namespace

// Everything read from the user's files: a failure here is theirs to fix, not ours to retry.
UserInputs load_user_inputs(const TrainConfig& c, const torch::Device& device, torch::Dtype dtype,
                            int local_processes, const PartLoaded& after_part) {
  try {
    check_host_memory_for_offload(c, device, local_processes);
    auto text = load_text_tools(c.model.path);
    auto options = dataset_options(c);
    auto train = data::load_jsonl(c.data.train, text.tokenizer, text.chat.get(), options);
    std::vector<data::Example> validation;
    if (c.data.validation)
      validation = data::load_jsonl(*c.data.validation, text.tokenizer, text.chat.get(), options);
    const bool qlora = c.method.type == api::MethodType::kQlora;
    const bool fp8 = c.model.precision == api::ModelPrecision::kFp8;
    if ((qlora || (fp8 && trains_adapters(c))) && c.model.init == api::ModelInit::kRandom &&
        c.output.save_merged)
      throw std::runtime_error(
          std::string("output.saveMerged: a merged model needs the base weights in full "
                      "precision, and with model.init random and ") +
          (qlora ? "method.type qlora they exist only in 4 bits"
                 : "model.precision fp8 they exist only in FP8"));
    if (fp8 && !kernels::fp8_supported_on(device))
      throw std::runtime_error(
          "model.precision fp8 needs an NVIDIA GPU of compute capability 9.0 "
          "(Hopper) or newer; " +
          device.str() + " is older: use model.precision default");
    torch::manual_seed(c.training.seed);
    auto model = load_model(c.model.path, device, dtype, lora_config(c),
                            c.method.type == api::MethodType::kFull, c.training.seed,
                            qlora ? std::optional(c.method.quantization) : std::nullopt,
                            c.model.init, after_part);
    if (fp8) {
      // The decoder layers only: the LM head's product stays in bf16, as torchao's recipes leave
      // it.
      int64_t layers = 0;
      for (auto& [prefix, part] : model->parts())
        if (std::dynamic_pointer_cast<kubetune::model::DecoderLayerImpl>(part))
          layers += kubetune::model::use_fp8_products(*part);
      log::info() << "model.precision fp8: " << layers
                  << " decoder linear layers take their products in FP8 E4M3";
    }
    return {std::move(text), std::move(train), std::move(validation), model};
  } catch (const std::exception& e) {
    throw UserInputError(e.what());
  }
}

// Where the run starts: step 0, or the counters of the checkpoint it resumes from.
TrainerState start_state(const TrainConfig& c, const BatchShape& shape, int world_size,
                         const std::optional<CheckpointContents>& checkpoint) {
  TrainerState state;
  if (checkpoint) {
    state.step = checkpoint->state.step;
    state.tokens_seen = checkpoint->state.tokens_seen;
    state.samples_seen = checkpoint->state.samples_seen;
  }
  state.global_batch = shape.global_batch;
  state.world_size = world_size;
  state.seed = c.training.seed;
  state.method = api::to_string(c.method.type);
  return state;
}

void restore_optimizer(Run& run, const CheckpointContents& c) {
  run.optimizer.load_state([&](const std::string& name) {
    if (!c.optimizer.contains(name))
      throw std::runtime_error(c.path + ": optimizer state lacks '" + name + "'");
    return c.optimizer.read(name);
  });
}

namespace {

// The checkpoint this run resumes from: the newest one that is intact and fits, an explicit one,
// or none. Checkpoints that exist but cannot be resumed are the user's to sort out (exit 2).
std::optional<CheckpointContents> find_resume_point(const TrainConfig& c,
                                                    const ResumeCheck& fits_run) {
  if (c.checkpoint.resume == "never") return std::nullopt;
  try {
    if (c.checkpoint.resume == "auto") return load_latest_checkpoint(checkpoint_dir(c), fits_run);
    auto checkpoint = load_checkpoint(c.checkpoint.resume);
    fits_run(checkpoint);
    return checkpoint;
  } catch (const CheckpointUnusable& e) {
    throw UserInputError(c.checkpoint.resume == "auto"
                             ? e.what()
                             : "checkpoint.resume " + c.checkpoint.resume + ": " + e.what());
  }
}

}  // namespace

// Rank 0 picks and verifies the checkpoint and tells the others its step, which they load without
// hashing it again: every rank resumes the same step even if a shared volume looks different to
// them for a moment, and a refusal stops all of them together rather than leaving some waiting.
std::optional<CheckpointContents> agree_on_resume_point(parallel::Communicator& comm,
                                                        const TrainConfig& c,
                                                        const torch::Device& device,
                                                        const ResumeCheck& fits_run) {
  constexpr int64_t kNone = -1, kRefused = -2;
  std::optional<CheckpointContents> found;
  std::string refusal;
  int64_t step = kNone;
  if (comm.rank() == 0) {
    try {
      found = find_resume_point(c, fits_run);
      if (found) step = found->state.step;
    } catch (const UserInputError& e) {
      refusal = e.what();
      step = kRefused;
    }
  }
  // Loading the model and data, and hashing every file of a checkpoint, take each rank as long as
  // its volume makes them.
  comm.wait_for_peers("every rank loading its inputs, rank 0 verifying the checkpoint");
  std::vector<torch::Tensor> message{torch::tensor({step}, torch::kInt64).to(device)};
  comm.broadcast(message, 0, "resume step");
  step = message[0].item<int64_t>();
  if (step == kRefused)
    throw UserInputError(comm.rank() == 0 ? refusal
                                          : "rank 0 refused the checkpoints (its log says why)");
  if (step == kNone) return found;
  if (comm.rank() != 0)
    found = load_checkpoint(c.checkpoint.resume == "auto" ? checkpoint_path(checkpoint_dir(c), step)
                                                          : c.checkpoint.resume,
                            /*verify_files=*/false);
  comm.wait_for_peers("every rank reading the checkpoint");
  return found;
}

// training.microBatchSize auto is chosen from rank 0's GPU and taken by every rank (a gang's GPUs
// are alike, and the ranks' micro-batches must be cut the same way); a number stays as it is.
MicroBatchChoice agree_on_micro_batch(parallel::Communicator& comm, TrainConfig& c,
                                      const model::ModelConfig& model, const torch::Device& device,
                                      int64_t resumed_global_batch) {
  const bool automatic = micro_batch_is_auto(c);
  std::optional<int64_t> gpu_memory;
  if (DeviceMemory memory; device_memory(device, memory) && memory.total > 0)
    gpu_memory = memory.total;
  MicroBatchChoice choice = resolve_micro_batch(
      c, model, comm.world_size(),
      configured_global_batch(c, comm.world_size(), resumed_global_batch), gpu_memory);
  if (!automatic) return choice;
  std::vector<torch::Tensor> size{torch::tensor({choice.size}, torch::kInt64).to(device)};
  comm.broadcast(size, 0, "micro-batch size");
  if (size[0].item<int64_t>() != choice.size) {
    choice.accumulation = choice.accumulation * choice.size / size[0].item<int64_t>();
    choice.size = size[0].item<int64_t>();
    choice.reason = "rank 0's choice";
    set_micro_batch_size(c, choice.size);
  }
  if (comm.rank() == 0)
    log::info() << "training.microBatchSize auto: " << choice.size << " x " << choice.accumulation
                << " accumulation: " << choice.reason;
  return choice;
}

}  // namespace kubetune::train
