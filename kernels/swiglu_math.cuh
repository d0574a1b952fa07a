// SwiGLU's arithmetic on the device, shared by the plain kernels (swiglu_cuda.cu) and those that
// also quantize their output to FP8 (swiglu_fp8_cuda.cu), so both compute the same values.
#pragma once

namespace kubetune::kernels {

__device__ inline float silu_times(float g, float u) { return g / (1.f + __expf(-g)) * u; }

// d/dgate and d/dup of silu(gate) * up, given the incoming gradient dy.
__device__ inline void swiglu_grads(float dy, float g, float u, float& d_gate, float& d_up) {
  const float s = 1.f / (1.f + __expf(-g));
  d_up = dy * g * s;
  d_gate = dy * u * s * (1.f + g * (1.f - s));
}

}  // namespace kubetune::kernels
