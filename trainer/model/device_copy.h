// Copies between host and device that do not make the host wait for the GPU to drain its queue.
#pragma once

#include <ATen/ATen.h>

namespace kubetune::model {

// Staged through pinned memory, whose caching allocator keeps the buffer alive until the copy has
// run; on a CPU device it is a plain copy.
inline at::Tensor to_device_async(const at::Tensor& host, const at::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

// Into pinned host memory, written when the stream gets there: read it only after synchronising
// with the work queued so far. A CPU tensor is copied at once.
inline at::Tensor to_host_async(const at::Tensor& t) {
  if (!t.is_cuda()) return t.cpu();
  auto host = at::empty(t.sizes(), t.options().device(at::kCPU).pinned_memory(true));
  host.copy_(t, /*non_blocking=*/true);
  return host;
}

}  // namespace kubetune::model
