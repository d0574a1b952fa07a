// Where a process computes and in which precision.
#pragma once

#include <torch/types.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "common/finetunejob_types.h"
#include "common/train_config.h"
#include "trainer/device/device_memory.h"

namespace kubetune::train {

// cuda:<local_rank> when GPUs are present, else CPU.
torch::Device pick_device(int local_rank);
// "auto" is bfloat16 on GPU and float32 on CPU (CPU bf16 matmuls are slow and lossy).
torch::Dtype compute_dtype(api::ModelDtype configured, const torch::Device& device);
// The dtype autocast rounds products' operands to in a step on `device` computing in `dtype`
// (AutocastScope below), or nullopt where there is no autocast: on the CPU, or in fp32.
std::optional<torch::Dtype> autocast_dtype(const torch::Device& device, torch::Dtype dtype);
// The dtype distributed.sharding full gathers full fine-tuning's layer matrices in, given the
// step's autocast dtype (trainer/parallel/full_sharding.h), or nullopt where every tensor is
// gathered as stored. The one rule the trainer and the memory model both follow.
std::optional<torch::Dtype> gathered_products_dtype(const TrainConfig& c, int world_size,
                                                    std::optional<torch::Dtype> autocast);
// Bytes in a GiB, for every memory figure the trainer prints.
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Bytes as GiB to two decimals, as reports show them.
inline double rounded_gib(int64_t bytes) { return std::round(bytes / kGiB * 100) / 100; }

// GPU memory of `device` from the caching allocator; nullopt-like zeros on CPU.
bool device_memory(const torch::Device& device, DeviceMemory& out);
void reset_peak_memory(const torch::Device& device);

// Points in time on the device's own timeline, so that phases of a step can be timed without the
// host waiting for the GPU: CUDA events on a GPU, the host clock on a CPU (where every operation
// is synchronous anyway).
class DeviceTimeline {
 public:
  explicit DeviceTimeline(const torch::Device& device);
  ~DeviceTimeline();
  DeviceTimeline(DeviceTimeline&&) noexcept;
  DeviceTimeline& operator=(DeviceTimeline&&) noexcept;

  size_t add();              // a new mark, recorded by record()
  void record(size_t mark);  // (re)sets `mark` to "now", in the order of the work queued so far
  size_t mark() {
    const size_t m = add();
    record(m);
    return m;
  }
  void wait();  // blocks the host until the device has reached every recorded mark
  double seconds_between(size_t first, size_t second) const;  // after wait()
  // From `first` on an earlier timeline of the same device to `second` on this one.
  double seconds_since(const DeviceTimeline& earlier, size_t first, size_t second) const;

 private:
  struct Marks;
  std::unique_ptr<Marks> marks_;
};

// Enables bf16 autocast on CUDA for its lifetime (matmuls in bf16, master weights stay fp32).
class AutocastScope {
 public:
  AutocastScope(const torch::Device& device, torch::Dtype dtype);
  ~AutocastScope();

 private:
  bool active_ = false;
};

}  // namespace kubetune::train
