#include "trainer/model/host_offload.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#ifdef KUBETUNE_HAVE_CUDA_KERNELS
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>
#endif

namespace kubetune::model {
namespace {

c10::Stream current_stream(const at::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

// Makes `waiter` wait for the work queued so far on `producer`.
void wait_for(const c10::Stream& producer, const c10::Stream& waiter) {
  c10::Event done(producer.device_type());
  done.record(producer);
  done.block(waiter);
}

}  // namespace

// Page-locked host memory of exactly `bytes`, freed with its last tensor.
struct HostOffload::PinnedBlock {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit PinnedBlock(size_t n) : bytes(n) {
#ifdef KUBETUNE_HAVE_CUDA_KERNELS
    C10_CUDA_CHECK(cudaHostAlloc(&ptr, n, cudaHostAllocDefault));
#else
    TORCH_CHECK(false, "HostOffload: built without CUDA");
#endif
  }
  ~PinnedBlock() {
#ifdef KUBETUNE_HAVE_CUDA_KERNELS
    if (ptr) cudaFreeHost(ptr);  // waits for the device; only when a larger block replaces it
#endif
  }
};

at::Tensor HostOffload::pinned_like(int64_t layer, const at::Tensor& x) {
  const size_t bytes = static_cast<size_t>(x.numel()) * x.element_size();
  auto& block = blocks_.at(static_cast<size_t>(layer));
  if (!block || block->bytes < bytes) block = std::make_shared<PinnedBlock>(bytes);
  // The tensor holds the block: a block replaced while a copy still reads it outlives the copy.
  auto keep = block;
  return at::from_blob(
      block->ptr, x.sizes(), [keep](void*) {}, x.options().device(at::kCPU));
}

c10::Stream HostOffload::copy_stream(const at::Device& device) {
  if (!copies_)
    copies_ = c10::impl::VirtualGuardImpl(device.type()).getStreamFromGlobalPool(device);
  return *copies_;
}

void HostOffload::store(int64_t layer, const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "HostOffload: layer inputs are offloaded from a GPU only");
  Slot& slot = slots_.at(static_cast<size_t>(layer));
  const c10::Stream compute = current_stream(x.device()), copies = copy_stream(x.device());
  slot = Slot{pinned_like(layer, x), {}, {}};
  wait_for(compute, copies);  // x is written by work queued on the compute stream
  {
    c10::StreamGuard on_copies(copies);
    slot.host.copy_(x, /*non_blocking=*/true);
  }
  // The allocator may hand x's memory out again only after the copy has read it.
  x.record_stream(copies);
}

void HostOffload::prefetch(int64_t layer) {
  if (layer < 0 || layer >= static_cast<int64_t>(slots_.size())) return;
  Slot& slot = slots_[static_cast<size_t>(layer)];
  if (!slot.host.defined() || slot.device.defined()) return;
  const at::Device device = copies_->device();
  const c10::Stream compute = current_stream(device), copies = *copies_;
  // Allocated for the compute stream, which will use it; written on the copy stream once the
  // compute stream is done with whatever used that memory before.
  slot.device =
      at::empty(slot.host.sizes(), slot.host.options().device(device).pinned_memory(false));
  wait_for(compute, copies);
  {
    c10::StreamGuard on_copies(copies);
    slot.device.copy_(slot.host, /*non_blocking=*/true);
  }
  slot.device.record_stream(copies);
  slot.ready.emplace(device.type());
  slot.ready->record(copies);
}

at::Tensor HostOffload::take(int64_t layer) {
  prefetch(layer);
  Slot& slot = slots_.at(static_cast<size_t>(layer));
  TORCH_CHECK(slot.device.defined(), "HostOffload: layer ", layer, " has no stored input");
  slot.ready->block(current_stream(slot.device.device()));
  at::Tensor x = slot.device;
  slot = Slot{};
  return x;
}

}  // namespace kubetune::model
