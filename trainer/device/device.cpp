#include "trainer/device/device.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>

#include <chrono>
#include <stdexcept>
#include <vector>

#ifdef KUBETUNE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace kubetune::train {

torch::Device pick_device(int local_rank) {
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  const int count = static_cast<int>(torch::cuda::device_count());
  if (local_rank >= count)
    throw std::runtime_error("LOCAL_RANK=" + std::to_string(local_rank) + " but only " +
                             std::to_string(count) + " GPU(s) are visible");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

torch::Dtype compute_dtype(api::ModelDtype configured, const torch::Device& device) {
  if (configured == api::ModelDtype::kFloat32) return torch::kFloat32;
  if (configured == api::ModelDtype::kBfloat16) return torch::kBFloat16;
  return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
}

bool device_memory(const torch::Device& device, DeviceMemory& out) {
#ifdef KUBETUNE_WITH_CUDA
  if (!device.is_cuda()) return false;
  using c10::cuda::CUDACachingAllocator::getDeviceStats;
  const auto stats = getDeviceStats(device.index());
  const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
  out.allocated = stats.allocated_bytes[aggregate].current;
  out.peak = stats.allocated_bytes[aggregate].peak;
  out.reserved = stats.reserved_bytes[aggregate].current;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    out.total = static_cast<int64_t>(total_bytes);
  return true;
#else
  (void)device;
  (void)out;
  return false;
#endif
}

void reset_peak_memory(const torch::Device& device) {
#ifdef KUBETUNE_WITH_CUDA
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#else
  (void)device;
#endif
}

struct DeviceTimeline::Marks {
  explicit Marks(const torch::Device& d) : device(d) {}
  torch::Device device;
  std::vector<std::chrono::steady_clock::time_point> host;
#ifdef KUBETUNE_WITH_CUDA
  std::vector<std::unique_ptr<c10::cuda::CUDAEvent>> events;
#endif
};

DeviceTimeline::DeviceTimeline(const torch::Device& device)
    : marks_(std::make_unique<Marks>(device)) {}
DeviceTimeline::~DeviceTimeline() = default;
DeviceTimeline::DeviceTimeline(DeviceTimeline&&) noexcept = default;
DeviceTimeline& DeviceTimeline::operator=(DeviceTimeline&&) noexcept = default;

size_t DeviceTimeline::add() {
#ifdef KUBETUNE_WITH_CUDA
  if (marks_->device.is_cuda()) {
    marks_->events.push_back(std::make_unique<c10::cuda::CUDAEvent>(cudaEventDefault));
    return marks_->events.size() - 1;
  }
#endif
  marks_->host.emplace_back();
  return marks_->host.size() - 1;
}

void DeviceTimeline::record(size_t mark) {
#ifdef KUBETUNE_WITH_CUDA
  if (marks_->device.is_cuda()) {
    marks_->events.at(mark)->record(c10::cuda::getCurrentCUDAStream(marks_->device.index()));
    return;
  }
#endif
  marks_->host.at(mark) = std::chrono::steady_clock::now();
}

void DeviceTimeline::wait() {
#ifdef KUBETUNE_WITH_CUDA
  for (const auto& event : marks_->events) event->synchronize();
#endif
}

double DeviceTimeline::seconds_between(size_t first, size_t second) const {
  return seconds_since(*this, first, second);
}

double DeviceTimeline::seconds_since(const DeviceTimeline& earlier, size_t first,
                                     size_t second) const {
#ifdef KUBETUNE_WITH_CUDA
  if (marks_->device.is_cuda())
    return earlier.marks_->events.at(first)->elapsed_time(*marks_->events.at(second)) / 1000.0;
#endif
  return std::chrono::duration<double>(marks_->host.at(second) - earlier.marks_->host.at(first))
      .count();
}

std::optional<torch::Dtype> autocast_dtype(const torch::Device& device, torch::Dtype dtype) {
  if (!device.is_cuda() || dtype == torch::kFloat32) return std::nullopt;
  return dtype;
}

std::optional<torch::Dtype> gathered_products_dtype(const TrainConfig& c, int world_size,
                                                    std::optional<torch::Dtype> autocast) {
  // One process gathers nothing; LoRA's frozen base is stored in the compute dtype already; FP8
  // products quantize the fp32 weight itself.
  if (c.distributed.sharding != api::DistributedSharding::kFull || world_size == 1 ||
      c.method.type != api::MethodType::kFull || c.model.precision == api::ModelPrecision::kFp8)
    return std::nullopt;
  return autocast;
}

AutocastScope::AutocastScope(const torch::Device& device, torch::Dtype dtype) {
  const auto autocast = autocast_dtype(device, dtype);
  if (!autocast) return;
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, *autocast);
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
}

}  // namespace kubetune::train
