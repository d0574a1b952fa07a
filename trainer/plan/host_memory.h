// Offloaded checkpoints (model.offloadCheckpoints) keep every decoder layer's input but the last
// in pinned host memory until backward reaches it: (layers - 1) x a micro-batch's tokens x the
// hidden width, 100 GB for Llama-3.1-8B at 393,216 tokens. A process that pins more than its pod
// may use is killed by the kernel without a word, after the model has loaded; this checks before.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/train_config.h"
#include "trainer/model/model_config.h"

namespace kubetune::train {

// Bytes of one layer input per token and element of the hidden width: bf16 between frozen bf16
// layers, fp32 when the weights are fp32 (full fine-tuning trains them so).
double recompute_input_element_bytes(const TrainConfig& c);

// Pinned host bytes one process takes for its offloaded checkpoints (0 without offloading).
int64_t offloaded_recompute_input_bytes(const model::ModelConfig& m, const TrainConfig& c);

// MemAvailable of a /proc/meminfo text, in bytes.
std::optional<int64_t> meminfo_available_bytes(const std::string& meminfo);
// What a cgroup v2 (a pod's) may still take: memory.max minus memory.current; nullopt when
// memory.max is "max" (no limit) or a text cannot be read as a number.
std::optional<int64_t> cgroup_room_bytes(const std::string& memory_max,
                                         const std::string& memory_current);
// This machine's: the smaller of the two above; nullopt when neither can be read.
std::optional<int64_t> available_host_memory();

// The error when `processes` processes of this pod pinning `need` bytes each do not fit in
// `available`, naming the fields to change; nullopt when they fit.
std::optional<std::string> offload_host_memory_error(int64_t need, int processes,
                                                     int64_t available);

}  // namespace kubetune::train
