// Host-to-device copies that do not make the host wait for the GPU to drain its queue.
#pragma once

#include <ATen/ATen.h>

namespace kubetune::model {

// Staged through pinned memory, whose caching allocator keeps the buffer alive until the copy has
// run; on a CPU device it is a plain copy.
inline at::Tensor to_device_async(const at::Tensor& host, const at::Device& device) {
  if (!device.is_cuda()) return host.to(device);
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace kubetune::model
