// Where a process computes and in which precision.
#pragma once

#include <torch/types.h>

#include <string>

#include "trainer/train/step_stats.h"

namespace kubetune::train {

// cuda:<local_rank> when GPUs are present, else CPU.
torch::Device pick_device(int local_rank);
// "auto" is bfloat16 on GPU and float32 on CPU (CPU bf16 matmuls are slow and lossy).
torch::Dtype compute_dtype(const std::string& configured, const torch::Device& device);
// GPU memory of `device` from the caching allocator; nullopt-like zeros on CPU.
bool device_memory(const torch::Device& device, DeviceMemory& out);
void reset_peak_memory(const torch::Device& device);

// Enables bf16 autocast on CUDA for its lifetime (matmuls in bf16, master weights stay fp32).
class AutocastScope {
 public:
  AutocastScope(const torch::Device& device, torch::Dtype dtype);
  ~AutocastScope();

 private:
  bool active_ = false;
};

}  // namespace kubetune::train
