#include "trainer/loop/outputs.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>

#include "common/log.h"
#include "trainer/io/hf_checkpoint.h"
#include "trainer/io/peft_adapter.h"
#include "trainer/loop/evaluate.h"
#include "trainer/plan/micro_batch.h"

namespace fs = std::filesystem;

namespace kubetune::train {
namespace {

// The trainable tensors' values for a checkpoint: those the weight sync does not hold whole
// gathered (a collective; only rank 0 gets them), the rest as they are.
NamedTensors trainable_weights(Run& run) {
  const auto gathered = run.weight_sync->gather_weights(run.comm.rank() == 0, true);
  NamedTensors out;
  for (size_t i = 0; i < run.trainable.names.size(); ++i) {
    const auto it = gathered.find(run.trainable.names[i]);
    out.emplace_back(run.trainable.names[i],
                     it != gathered.end() ? it->second : run.trainable.tensors[i]);
  }
  return out;
}

// The adapter or model folder (and the merged model), written by rank 0; the gathers of sharded
// weights it reads are collectives all take part in.
void write_outputs(Run& run) {
  const auto& c = run.config;
  const auto lora = lora_config(c);
  const bool random_base = c.model.init == api::ModelInit::kRandom;
  // Weights the outputs read that the weight sync does not hold whole, gathered to rank 0's host
  // (a collective).
  std::map<std::string, torch::Tensor> gathered;
  if (!lora || (c.output.save_merged && random_base))
    gathered = run.weight_sync->gather_weights(run.comm.rank() == 0, false);
  const io::ParameterValue value_of = [&](const std::string& name, const torch::Tensor& t) {
    const auto it = gathered.find(name);
    return it == gathered.end() ? t : it->second;
  };
  if (run.comm.rank() != 0) return;
  fs::create_directories(c.output.dir);
  if (lora) {
    io::save_peft_adapter(run.model, *lora, c.model.path, c.output.dir);
    if (c.output.save_merged) {
      // The base weights in full precision come from the folder again; randomly initialised
      // ones exist only here (drawn in their storage dtype, so the copy is exact).
      auto merged = load_model(c.model.path, torch::Device(torch::kCPU), torch::kFloat32, lora,
                               false, c.training.seed, std::nullopt, c.model.init);
      torch::NoGradGuard no_grad;
      auto ours = run.model->named_parameters();
      for (auto& item : merged->named_parameters())
        if (item.value().requires_grad() || random_base)
          item.value().copy_(value_of(item.key(), ours[item.key()]).to(torch::kCPU));
      model::merge_lora(merged);
      io::save_hf_model(merged, c.output.dir + "/merged", torch::kFloat32);
      io::copy_tokenizer_files(c.model.path, c.output.dir + "/merged");
    }
  } else {
    io::save_hf_model(run.model, c.output.dir, torch::kFloat32, 5'000'000'000, value_of);
    io::copy_tokenizer_files(c.model.path, c.output.dir);
  }
  log::info() << "saved " << (lora ? "PEFT adapter" : "model") << " output=" << c.output.dir;
}

}  // namespace

void write_checkpoint(Run& run) {
  run.weight_sync->wait_for_weights();
  auto optimizer_state = run.optimizer.state();
  const auto sharded_state = run.weight_sync->gather_optimizer_state(run.comm.rank() == 0);
  optimizer_state.insert(optimizer_state.end(), sharded_state.begin(), sharded_state.end());
  const NamedTensors weights = trainable_weights(run);
  if (run.comm.rank() == 0) {
    const auto lora = lora_config(run.config);
    auto path =
        save_checkpoint(checkpoint_dir(run.config), run.state, weights, optimizer_state,
                        [&](const std::string& tmp) {
                          if (lora)
                            io::save_peft_adapter(run.model, *lora, run.config.model.path, tmp);
                        });
    prune_checkpoints(checkpoint_dir(run.config), run.config.checkpoint.keep_last);
    for (auto& o : run.observers) o->on_checkpoint(run.state.step, path);
  }
  // Rank 0 may write for longer than any collective may take (a slow volume, a large model).
  run.comm.wait_for_peers("rank 0 writing the checkpoint");
  run.checkpointed_step = run.state.step;
}

double run_validation(Run& run) {
  run.weight_sync->wait_for_weights();
  auto result = evaluate(*run.model, run.validation, micro_batch_size(run.config), run.text.pad_id,
                         run.device, run.dtype, &run.comm);
  run.weight_sync->after_evaluation();
  return result.mean_loss;
}

void save_outputs(Run& run) {
  run.weight_sync->wait_for_weights();
  write_outputs(run);
  run.comm.wait_for_peers("rank 0 writing the outputs");
}

}  // namespace kubetune::train
