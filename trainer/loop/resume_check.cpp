#include "trainer/loop/resume_check.h"

#include <map>
#include <stdexcept>
#include <string>

#include "trainer/plan/batch_shape.h"

namespace kubetune::train {
namespace {

std::string shape_text(c10::IntArrayRef sizes) { return c10::str(sizes); }

// `name` is in `tensors` with `shape`, or the reason it is not.
void expect_tensor(const StoredTensors& tensors, const std::string& what, const std::string& name,
                   c10::IntArrayRef shape) {
  if (!tensors.contains(name))
    throw CheckpointUnusable("no tensor \"" + name + "\" in " + what +
                             " (written for other LoRA targets or another model?)");
  if (c10::IntArrayRef(tensors.shape(name)) != shape)
    throw CheckpointUnusable(what + ": tensor \"" + name + "\" has shape " +
                             shape_text(tensors.shape(name)) + ", the model's is " +
                             shape_text(shape));
}

}  // namespace

void check_resumable(const CheckpointContents& checkpoint, const TrainConfig& config,
                     const NamedParams& trainable, int world, size_t examples) {
  const TrainerState& state = checkpoint.state;
  if (state.method != api::to_string(config.method.type))
    throw CheckpointUnusable("written by a \"" + state.method + "\" run; this config trains \"" +
                             api::to_string(config.method.type) + "\"");
  const StoredTensors& weights = checkpoint.trainable;
  const StoredTensors& moments = checkpoint.optimizer;
  for (size_t i = 0; i < trainable.names.size(); ++i) {
    const std::string& name = trainable.names[i];
    const auto shape = trainable.tensors[i].sizes();
    expect_tensor(weights, "the trainable weights", name, shape);
    expect_tensor(moments, "the optimizer state", name + ".exp_avg", shape);
    expect_tensor(moments, "the optimizer state", name + ".exp_avg_sq", shape);
  }
  expect_tensor(moments, "the optimizer state", "step", {1});
  // The schedule a resumed run follows is the checkpoint's global batch (batch_shape.h).
  const auto global =
      static_cast<size_t>(configured_global_batch(config, world, state.global_batch));
  const int64_t last = total_steps(config, static_cast<int64_t>((examples + global - 1) / global));
  if (state.step > last)
    throw CheckpointUnusable("at step " + std::to_string(state.step) +
                             ", past this run's last step " + std::to_string(last) +
                             " (did maxSteps, epochs or the data shrink?)");
}

}  // namespace kubetune::train
