// CUDA implementation of kubetune::quantize_4bit and kubetune::dequantize_4bit with the CPU
// reference's arithmetic: IEEE float32 division and multiplication (__fdiv_rn, __fmul_rn, never
// contracted into a fused multiply-add), so both give the same bytes and the same weights.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/launch.cuh"
#include "kernels/quant4_device.cuh"

namespace kubetune::kernels {
namespace {

using namespace quant4;

// One thread per block of `blocksize` values: load time only, so simple over fast.
template <typename T>
__global__ void quantize_4bit_kernel(const T* __restrict__ x, uint8_t* __restrict__ packed,
                                     float* __restrict__ absmax, int64_t n, int64_t blocksize,
                                     CodeBook book) {
  const int64_t blocks = (n + blocksize - 1) / blocksize;
  for (int64_t blk = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; blk < blocks;
       blk += int64_t(blockDim.x) * gridDim.x) {
    const int64_t start = blk * blocksize, end = min(n, start + blocksize);
    float m = 0;
    for (int64_t i = start; i < end; ++i) m = fmaxf(m, fabsf(static_cast<float>(x[i])));
    const bool partial = end - start < blocksize;
    const float clamped = fmaxf(m, kMinAbsmax), inverse = __fdiv_rn(1.0f, clamped);
    absmax[blk] = partial ? clamped : m;
    for (int64_t i = start; i < end; i += 2) {
      uint8_t byte = 0;
      for (int64_t k = i; k < i + 2; ++k) {
        float s = 0.0f;  // the odd element's partner
        if (k < end) {
          const float v = static_cast<float>(x[k]);
          s = fminf(fmaxf(partial ? __fdiv_rn(v, clamped) : __fmul_rn(v, inverse), -1.0f), 1.0f);
        }
        byte = static_cast<uint8_t>((byte << 4) | encode_4bit(s, book));
      }
      packed[i / 2] = byte;
    }
  }
}

// Each thread turns 4 packed bytes into 8 values of one block (blocks hold a multiple of 8): one
// 4-byte load, one scale, one 16-byte store of bf16 (two of float32), so that a warp's loads and
// stores are each one contiguous run. (Sixteen values a thread, a warp's 16-byte stores 32 bytes
// apart, took 72 us a weight on Phi-4's layers where bitsandbytes' kernel took 62.) For n a
// multiple of 8 and aligned pointers.
template <typename T, bool kNested>
__global__ void dequantize_4bit_x8_kernel(const uint32_t* __restrict__ packed, BlockScales scales,
                                          T* __restrict__ out, int64_t groups, CodeBook book) {
  __shared__ float code[16], map[256];
  load_tables<kNested>(book, code, map);
  for (int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; g < groups;
       g += int64_t(blockDim.x) * gridDim.x) {
    const uint32_t bits = packed[g];
    const float scale = scales.template of<kNested>(g * 8, map);
    __align__(16) T v[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t byte = (bits >> (8 * j)) & 0xFF;  // little-endian
      v[2 * j] = static_cast<T>(__fmul_rn(code[byte >> 4], scale));
      v[2 * j + 1] = static_cast<T>(__fmul_rn(code[byte & 0xF], scale));
    }
    constexpr int kStores = 8 * sizeof(T) / sizeof(uint4);
#pragma unroll
    for (int k = 0; k < kStores; ++k) {
      reinterpret_cast<uint4*>(out + g * 8)[k] = reinterpret_cast<const uint4*>(v)[k];
    }
  }
}

// Any n and alignment: one thread per packed byte (two values).
template <typename T, bool kNested>
__global__ void dequantize_4bit_kernel(const uint8_t* __restrict__ packed, BlockScales scales,
                                       T* __restrict__ out, int64_t n, CodeBook book) {
  __shared__ float code[16], map[256];
  load_tables<kNested>(book, code, map);
  for (int64_t byte = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; 2 * byte < n;
       byte += int64_t(blockDim.x) * gridDim.x) {
    const uint8_t p = packed[byte];
    for (int h = 0; h < 2; ++h) {
      const int64_t i = 2 * byte + h;
      if (i >= n) break;
      const float scale = scales.template of<kNested>(i, map);
      out[i] = static_cast<T>(__fmul_rn(code[h == 0 ? p >> 4 : p & 0xF], scale));
    }
  }
}

std::tuple<at::Tensor, at::Tensor> quantize_4bit_cuda(const at::Tensor& weight, int64_t blocksize,
                                                      c10::string_view type) {
  check_blocksize_4bit(blocksize);
  c10::cuda::CUDAGuard guard(weight.device());
  const at::Tensor x = weight.contiguous().reshape(-1);
  const int64_t n = x.numel(), blocks = (n + blocksize - 1) / blocksize;
  at::Tensor packed = at::empty({(n + 1) / 2, 1}, x.options().dtype(at::kByte));
  at::Tensor absmax = at::empty({blocks}, x.options().dtype(at::kFloat));
  if (n == 0) return {packed, absmax};
  const CodeBook book = device_code_book(type);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "quantize_4bit", [&] {
    quantize_4bit_kernel<scalar_t>
        <<<blocks_for(blocks), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), packed.data_ptr<uint8_t>(), absmax.data_ptr<float>(), n,
            blocksize, book);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {packed, absmax};
}

at::Tensor dequantize_4bit_cuda(const at::Tensor& packed, const at::Tensor& absmax,
                                const c10::optional<at::Tensor>& nested_absmax, double offset,
                                c10::IntArrayRef shape, int64_t blocksize, c10::string_view type,
                                c10::ScalarType dtype) {
  c10::cuda::CUDAGuard guard(packed.device());
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const at::Tensor bytes = packed.contiguous().view(at::kByte).reshape(-1);
  TORCH_CHECK(bytes.numel() * 2 >= n, "dequantize_4bit: too few packed bytes for the shape");
  at::Tensor out = at::empty(shape, packed.options().dtype(dtype));
  if (n == 0) return out;
  const CodeBook book = device_code_book(type);
  const BlockScaleTensors block_scales(absmax, nested_absmax, offset, blocksize);
  const BlockScales& scales = block_scales.view;
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "dequantize_4bit", [&] {
    scalar_t* o = out.data_ptr<scalar_t>();
    const bool x8 = n % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 4 == 0 &&
                    reinterpret_cast<uintptr_t>(o) % 16 == 0;
    auto launch = [&](auto nested_tag) {
      constexpr bool kNested = decltype(nested_tag)::value;
      if (x8) {
        dequantize_4bit_x8_kernel<scalar_t, kNested><<<blocks_for(n / 8), kThreads, 0, stream>>>(
            reinterpret_cast<const uint32_t*>(p), scales, o, n / 8, book);
      } else {
        dequantize_4bit_kernel<scalar_t, kNested>
            <<<blocks_for((n + 1) / 2), kThreads, 0, stream>>>(p, scales, o, n, book);
      }
    };
    with_nested(block_scales.double_quant(), launch);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(kubetune, CUDA, m) {
  m.impl("quantize_4bit", quantize_4bit_cuda);
  m.impl("dequantize_4bit", dequantize_4bit_cuda);
}

}  // namespace kubetune::kernels
