// Resumable checkpoints: trainable weights, optimizer state and the position in training.
//
// Layout: <dir>/step-00000120/
//   trainable-RRRRR-of-NNNNN.safetensors, optimizer-RRRRR-of-NNNNN.safetensors  one pair per
//   process part-RRRRR-of-NNNNN.json      that pair's sizes and checksums, written by its process
//   trainer_state.json            the step and counters, and every file's size and checksum
//   (+ a PEFT adapter for LoRA runs, so any checkpoint is also a usable adapter).
// Each process writes the elements its optimizer updates (its slices under sharding; whole tensors
// are dealt out between processes), streamed from the device tensor by tensor: nothing is gathered
// to one process, and all write at once. A piece is stored flat under "<name>@<first element>",
// the tensor's shape in the file's metadata; loading puts the pieces together, so a checkpoint
// resumes on any number of processes and in any sharding mode. (Checkpoints of one
// trainable.safetensors and optimizer.safetensors, written before, still load.)
//
// A checkpoint is written into a hidden temporary folder and renamed into place only when complete,
// so a crash mid-write never leaves something that looks like a checkpoint. trainer_state.json,
// written last, records each other file's size and XXH3-64 checksum (`xxhsum -H3` checks them by
// hand); loading verifies them and falls back to the previous checkpoint if one is damaged.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <memory>
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

// The tensors of one kind ("trainable", "optimizer") in a checkpoint, read when asked for: a
// tensor is put together from its pieces in the memory-mapped files only then, so resuming holds
// one tensor at a time in host memory, not a process's whole state (96 GB for an 8B model's full
// fine-tuning). Every element's piece is checked to exist exactly once when the checkpoint loads.
class StoredTensors {
 public:
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  const std::vector<int64_t>& shape(const std::string& name) const;
  torch::Tensor read(const std::string& name) const;  // on the CPU; throws naming a missing one

  // A piece: the elements [offset, offset + values.numel()) of `name`, of shape `shape` whole.
  void add(const std::string& name, const std::vector<int64_t>& shape, int64_t offset,
           const torch::Tensor& values, std::shared_ptr<const void> keep_alive);
  // Throws CheckpointUnusable naming a tensor whose pieces leave a gap or overlap.
  void check_complete(const std::string& kind) const;

 private:
  struct Piece {
    int64_t offset;
    torch::Tensor values;                 // a view into a memory-mapped file
    std::shared_ptr<const void> mapping;  // what keeps that file mapped
  };
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;
  };
  std::map<std::string, Entry> entries_;
};

struct CheckpointContents {
  std::string path;
  TrainerState state;
  StoredTensors trainable;
  StoredTensors optimizer;
};

// Elements [offset, offset + numel) of the flattened tensor `name` of shape `shape`.
struct TensorPiece {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  torch::Tensor values;  // 1-D, on any device
};

// One process's part of a checkpoint.
struct CheckpointPart {
  std::vector<TensorPiece> trainable, optimizer;
};

// Writing a checkpoint of `step` into `dir`, in three moves the processes take in turn:
//   begin_checkpoint                   rank 0: an empty temporary folder
//   write_checkpoint_part              every process: its part, into that folder
//   publish_checkpoint                 rank 0: `extra` files (the adapter), the state file, the
//                                      rename into place; returns the final folder
std::string partial_checkpoint_path(const std::string& dir, int64_t step);
void begin_checkpoint(const std::string& dir, int64_t step);
void write_checkpoint_part(const std::string& dir, int64_t step, int rank, int world,
                           const CheckpointPart& part);
std::string publish_checkpoint(const std::string& dir, const TrainerState& state,
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
