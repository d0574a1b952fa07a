// A process's GPU memory, as the caching allocator reports it (device.h reads it; the step's
// record carries it to every observer). No LibTorch here: the run's records are written without it.
#pragma once

#include <cstdint>

namespace kubetune::train {

struct DeviceMemory {  // bytes; only on GPU
  int64_t allocated = 0, reserved = 0, peak = 0, total = 0;
};

}  // namespace kubetune::train
