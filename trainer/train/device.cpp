#include "trainer/train/device.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>

#include <stdexcept>

#ifdef KUBETUNE_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
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

torch::Dtype compute_dtype(const std::string& configured, const torch::Device& device) {
  if (configured == "float32") return torch::kFloat32;
  if (configured == "bfloat16") return torch::kBFloat16;
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

AutocastScope::AutocastScope(const torch::Device& device, torch::Dtype dtype) {
  if (!device.is_cuda() || dtype == torch::kFloat32) return;
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
  active_ = true;
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  at::autocast::set_autocast_enabled(at::kCUDA, false);
  at::autocast::clear_cache();
}

}  // namespace kubetune::train
