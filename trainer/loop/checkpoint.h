// Resumable checkpoints: trainable weights, optimizer state and the position in training.
//
// Layout: <dir>/step-00000120/{trainable.safetensors, optimizer.safetensors, trainer_state.json}
// (+ a PEFT adapter for LoRA runs, so any checkpoint is also a usable adapter). A checkpoint is
// written into a hidden temporary folder and renamed into place only when complete, so a crash
// mid-write never leaves something that looks like a checkpoint. trainer_state.json, written last,
// records each other file's size and XXH3-64 checksum (`xxhsum -H3` checks them by hand); loading
// verifies them and falls back to the previous checkpoint if one is damaged.
#pragma once

#include <torch/types.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kubetune::train {

struct TrainerState {
  int64_t step = 0;  // optimizer steps completed
  int64_t tokens_seen = 0;
  int64_t samples_seen = 0;
  int64_t global_batch = 0;
  int world_size = 1;
  uint64_t seed = 0;
  std::string method;
  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json&);
};

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// A checkpoint that is damaged or does not fit the run: the next older one is tried. Other errors
// (a volume that fails to read) are not the checkpoint's fault and propagate.
class CheckpointUnusable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CheckpointContents {
  std::string path;
  TrainerState state;
  NamedTensors trainable;  // CPU tensors
  NamedTensors optimizer;
};

// Writes atomically and returns the final folder. `extra` may add files (e.g. the PEFT adapter)
// into the temporary folder before it is renamed.
std::string save_checkpoint(const std::string& dir, const TrainerState& state,
                            const NamedTensors& trainable, const NamedTensors& optimizer,
                            const std::function<void(const std::string& tmp_dir)>& extra = {});

// Complete checkpoints in `dir`, newest first.
std::vector<std::string> list_checkpoints(const std::string& dir);

// <dir>/step-00000120: where save_checkpoint puts the checkpoint of a step.
std::string checkpoint_path(const std::string& dir, int64_t step);

// Loads one checkpoint folder, verifying the state against the folder's name and, with
// `verify_files`, every file against the size and checksum the state recorded; throws
// CheckpointUnusable naming the file on any damage.
CheckpointContents load_checkpoint(const std::string& path, bool verify_files = true);

// Throws CheckpointUnusable, saying why, when a loaded checkpoint cannot be resumed by this run
// (another method, a tensor missing or of another shape, a step past the end).
using ResumeCheck = std::function<void(const CheckpointContents&)>;

// The newest checkpoint under `dir` that loads and passes `fits_run`; damaged or unfitting ones are
// logged and skipped. None found: nullopt if there are none at all, else CheckpointUnusable listing
// why each was refused (so that work is never dropped silently).
std::optional<CheckpointContents> load_latest_checkpoint(const std::string& dir,
                                                         const ResumeCheck& fits_run = {});

// Keeps the newest `keep` checkpoints.
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace kubetune::train
