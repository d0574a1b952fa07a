// The gated activations' arithmetic on the device, shared by the plain kernels (swiglu_cuda.cu)
// and those that also quantize their output to FP8 (swiglu_fp8_cuda.cu), so both compute the same
// values.
#pragma once

namespace kubetune::kernels {

__device__ inline float silu_times(float g, float u) { return g / (1.f + __expf(-g)) * u; }

// d/dgate and d/dup of silu(gate) * up, given the incoming gradient dy.
__device__ inline void swiglu_grads(float dy, float g, float u, float& d_gate, float& d_up) {
  const float s = 1.f / (1.f + __expf(-g));
  d_up = dy * g * s;
  d_gate = dy * u * s * (1.f + g * (1.f - s));
}

// SwiGLU: silu(gate) * up.
struct SiluGate {
  __device__ static float times(float g, float u) { return silu_times(g, u); }
  __device__ static void grads(float dy, float g, float u, float& d_gate, float& d_up) {
    swiglu_grads(dy, g, u, d_gate, d_up);
  }
};

// GeGLU: gelu(gate, approximate="tanh") * up, PyTorch's formula and its derivative.
struct GeluTanhGate {
  static constexpr float kSqrt2OverPi = 0.7978845608028654f, kCubic = 0.044715f;
  __device__ static float times(float g, float u) {
    const float t = tanhf(kSqrt2OverPi * (g + kCubic * g * g * g));
    return 0.5f * g * (1.f + t) * u;
  }
  __device__ static void grads(float dy, float g, float u, float& d_gate, float& d_up) {
    const float t = tanhf(kSqrt2OverPi * (g + kCubic * g * g * g));
    const float gelu = 0.5f * g * (1.f + t);
    const float d_gelu =
        0.5f * (1.f + t) + 0.5f * g * (1.f - t * t) * kSqrt2OverPi * (1.f + 3.f * kCubic * g * g);
    d_up = dy * gelu;
    d_gate = dy * u * d_gelu;
  }
};

}  // namespace kubetune::kernels
