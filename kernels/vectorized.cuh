// 16-byte loads and stores (8 bf16/fp16 or 4 fp32 values per instruction): elementwise kernels that
// move data one scalar at a time reach only a fraction of the GPU's memory bandwidth.
#pragma once

#include <cstdint>

namespace kubetune::kernels {

template <typename T>
struct Vec {
  static constexpr int kWidth = 16 / sizeof(T);
  struct alignas(16) Pack {
    T v[kWidth];
  };

  // Whether `count` elements starting at each of `ptrs` can be read with 16-byte accesses.
  template <typename... Ptrs>
  static bool usable(int64_t count, const Ptrs*... ptrs) {
    return count % kWidth == 0 &&
           ((reinterpret_cast<std::uintptr_t>(ptrs) % sizeof(Pack) == 0) && ...);
  }
  __device__ static Pack load(const T* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ static void store(T* p, const Pack& pack) { *reinterpret_cast<Pack*>(p) = pack; }
};

}  // namespace kubetune::kernels
