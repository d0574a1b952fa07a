// Launch sizes shared by the elementwise kernels. Each of them loops grid-stride, so the grid only
// has to fill the GPU: 32 blocks of 256 threads per multiprocessor, or fewer when the work is
// small.
#pragma once

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>

namespace kubetune::kernels {

constexpr int kThreads = 256;

// Blocks for `work` items, one per thread.
inline int blocks_for(int64_t work) {
  const int64_t wanted = (work + kThreads - 1) / kThreads;
  const int64_t cap = int64_t(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 32;
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, cap)));
}

}  // namespace kubetune::kernels
