#include "kernels/quant4.h"

#include <ATen/Parallel.h>
#include <torch/library.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iterator>

#include "kernels/quant4_codes.h"

namespace kubetune::kernels {
namespace {

using namespace quant4;

const CodeBook& code_book(const std::string& type) {
  TORCH_CHECK(type == "nf4" || type == "fp4", "4-bit quantization type must be nf4 or fp4, not ",
              type);
  static const CodeBook nf4 = make_code_book(true), fp4 = make_code_book(false);
  return type == "nf4" ? nf4 : fp4;
}

// bitsandbytes' CPU rule: full blocks multiply by 1/max(absmax, 1e-38); the last, partial block
// divides by its absmax clamped to 1e-38 (and stores the clamped value).
std::tuple<torch::Tensor, torch::Tensor> quantize_4bit_cpu(const torch::Tensor& weight,
                                                           int64_t blocksize,
                                                           const std::string& type) {
  check_blocksize_4bit(blocksize);
  const CodeBook& book = code_book(type);
  const torch::Tensor a = weight.reshape(-1).to(torch::kFloat32).contiguous();
  const int64_t n = a.numel(), blocks = (n + blocksize - 1) / blocksize;
  torch::Tensor packed = torch::zeros({(n + 1) / 2, 1}, torch::kUInt8);
  torch::Tensor absmax = torch::empty({blocks}, torch::kFloat32);
  const float* x = a.data_ptr<float>();
  uint8_t* out = packed.data_ptr<uint8_t>();
  float* am = absmax.data_ptr<float>();
  at::parallel_for(0, blocks, 64, [&](int64_t first, int64_t last) {
    for (int64_t blk = first; blk < last; ++blk) {
      const int64_t start = blk * blocksize, end = std::min(n, start + blocksize);
      float m = 0;
      for (int64_t i = start; i < end; ++i) m = std::max(m, std::fabs(x[i]));
      const bool partial = end - start < blocksize;
      const float clamped = std::max(m, kMinAbsmax), inverse = 1.0f / clamped;
      am[blk] = partial ? clamped : m;
      // blocksize is even, so a block never shares a byte with the next one.
      for (int64_t i = start; i < end; ++i) {
        const float s = std::clamp(partial ? x[i] / clamped : x[i] * inverse, -1.0f, 1.0f);
        const uint8_t code = encode_4bit(s, book);
        out[i / 2] |= (i % 2 == 0) ? static_cast<uint8_t>(code << 4) : code;
      }
      if (end == n && n % 2 == 1)
        out[n / 2] |= encode_4bit(0.0f, book);  // the odd element's partner
    }
  });
  return {packed, absmax};
}

// bitsandbytes' native CPU 8-bit blockwise quantization: the value's position on a 65536-point
// grid of [-1, 1] (with a fused multiply-add, as the compiled library rounds it) looks up the
// code whose bucket holds that grid point.
const std::array<uint8_t, 65536>& dynamic_map_grid() {
  static const std::array<uint8_t, 65536> grid = [] {
    std::array<float, 256> code;
    for (int i = 0; i < 256; ++i) std::memcpy(&code[i], &kDynamicMapBits[i], sizeof(float));
    std::array<float, 255> mid;
    for (int j = 0; j < 255; ++j) mid[j] = 0.5f * (code[j] + code[j + 1]);
    std::array<uint8_t, 65536> g;
    int k = 0;
    for (int i = 0; i < 65536; ++i) {
      const float v = (2.0f * static_cast<float>(i)) / 65535.0f - 1.0f;
      while (k < 255 && mid[k] < v) ++k;
      g[i] = static_cast<uint8_t>(k);
    }
    return g;
  }();
  return grid;
}

std::tuple<torch::Tensor, torch::Tensor> quantize_8bit_blockwise_cpu(const torch::Tensor& values) {
  const torch::Tensor a = values.reshape(-1).to(torch::kFloat32).contiguous();
  const int64_t n = a.numel(), blocks = (n + kNestedBlocksize - 1) / kNestedBlocksize;
  torch::Tensor codes = torch::zeros({n}, torch::kUInt8);
  torch::Tensor absmax = torch::empty({blocks}, torch::kFloat32);
  const auto& grid = dynamic_map_grid();
  const float* x = a.data_ptr<float>();
  uint8_t* q = codes.data_ptr<uint8_t>();
  float* am = absmax.data_ptr<float>();
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t start = blk * kNestedBlocksize, end = std::min(n, start + kNestedBlocksize);
    float m = 0;
    for (int64_t i = start; i < end; ++i) m = std::max(m, std::fabs(x[i]));
    am[blk] = m;
    if (m == 0) continue;  // codes stay 0
    const float inverse = 1.0f / m;
    for (int64_t i = start; i < end; ++i) {
      const float v = std::clamp(x[i] * inverse, -1.0f, 1.0f);
      const auto index = static_cast<uint16_t>(std::fmaf((v + 1.0f) * 0.5f, 65535.0f, 0.5f));
      q[i] = grid[index];
    }
  }
  return {codes, absmax};
}

// The absmax of every 4-bit block in float32: stored, or decoded from the double quantization
// (code * nested absmax, then + offset, two float32 roundings as bitsandbytes does).
torch::Tensor block_absmax(const torch::Tensor& absmax, const c10::optional<torch::Tensor>& nested,
                           double offset) {
  if (!nested || !nested->defined()) return absmax.to(torch::kFloat32).contiguous();
  const torch::Tensor q = absmax.contiguous();
  const torch::Tensor nested_f = nested->to(torch::kFloat32).contiguous();
  torch::Tensor out = torch::empty({q.numel()}, torch::kFloat32);
  const uint8_t* codes = q.data_ptr<uint8_t>();
  const float* scale = nested_f.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const auto off = static_cast<float>(offset);
  for (int64_t j = 0; j < q.numel(); ++j) {
    float code;
    std::memcpy(&code, &kDynamicMapBits[codes[j]], sizeof(float));
    o[j] = code * scale[j / kNestedBlocksize] + off;
  }
  return out;
}

torch::Tensor dequantize_4bit_cpu(const torch::Tensor& packed, const torch::Tensor& absmax,
                                  const c10::optional<torch::Tensor>& nested_absmax, double offset,
                                  c10::IntArrayRef shape, int64_t blocksize,
                                  const std::string& type, c10::ScalarType dtype) {
  check_blocksize_4bit(blocksize);
  const CodeBook& book = code_book(type);
  const torch::Tensor am = block_absmax(absmax, nested_absmax, offset);
  const torch::Tensor bytes = packed.contiguous().view(torch::kUInt8).reshape(-1);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TORCH_CHECK(bytes.numel() * 2 >= n, "dequantize_4bit: ", bytes.numel(),
              " packed bytes cannot hold ", n, " values");
  torch::Tensor out = torch::empty({n}, torch::kFloat32);
  const uint8_t* p = bytes.data_ptr<uint8_t>();
  const float* scale = am.data_ptr<float>();
  float* o = out.data_ptr<float>();
  at::parallel_for(0, n, 1 << 14, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const uint8_t code = (i % 2 == 0) ? (p[i / 2] >> 4) : (p[i / 2] & 0xF);
      o[i] = book.values[code] * scale[i / blocksize];
    }
  });
  return out.to(dtype).reshape(shape);  // one round to nearest even
}

}  // namespace

void check_blocksize_4bit(int64_t blocksize) {
  TORCH_CHECK(valid_blocksize_4bit(blocksize),
              "4-bit quantization blocksize must be a power of two from 32 to 4096, not ",
              blocksize);
}

int64_t Quant4State::bytes() const {
  auto size = [](const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; };
  return size(packed) + size(absmax) + size(nested_absmax);
}

Quant4State quantize_4bit(const torch::Tensor& weight, const std::string& type, int64_t blocksize,
                          bool double_quant) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("kubetune::quantize_4bit", "")
                       .typed<std::tuple<torch::Tensor, torch::Tensor>(
                           const torch::Tensor&, int64_t, c10::string_view)>();
  torch::NoGradGuard no_grad;
  Quant4State s;
  s.type = type;
  s.blocksize = blocksize;
  s.shape = weight.sizes().vec();
  std::tie(s.packed, s.absmax) = op.call(weight.contiguous(), blocksize, type);
  if (double_quant) {
    // Small (one value per block) and bit-exact on the CPU: done there, as bitsandbytes does.
    const torch::Tensor absmax = s.absmax.cpu();
    const torch::Tensor offset = absmax.mean();
    auto [codes, nested] = quantize_8bit_blockwise_cpu(absmax - offset);
    s.offset = offset.item<float>();
    s.absmax = codes.to(weight.device());
    s.nested_absmax = nested.to(weight.device());
  }
  return s;
}

torch::Tensor dequantize_4bit(const Quant4State& s, torch::ScalarType dtype) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("kubetune::dequantize_4bit", "")
          .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&,
                               const c10::optional<torch::Tensor>&, double, c10::IntArrayRef,
                               int64_t, c10::string_view, c10::ScalarType)>();
  torch::NoGradGuard no_grad;
  c10::optional<torch::Tensor> nested;
  if (s.double_quant()) nested = s.nested_absmax;
  return op.call(s.packed, s.absmax, nested, s.offset, s.shape, s.blocksize, s.type, dtype);
}

torch::Tensor code_book_4bit(const std::string& type) {
  const CodeBook& b = code_book(type);
  return torch::tensor(std::vector<float>(std::begin(b.values), std::end(b.values)));
}

torch::Tensor dynamic_map_8bit() {
  std::vector<float> v(256);
  std::memcpy(v.data(), kDynamicMapBits, sizeof(kDynamicMapBits));
  return torch::tensor(v);
}

TORCH_LIBRARY_FRAGMENT(kubetune, m) {
  m.def("quantize_4bit(Tensor weight, int blocksize, str type) -> (Tensor packed, Tensor absmax)");
  m.def(
      "dequantize_4bit(Tensor packed, Tensor absmax, Tensor? nested_absmax, float offset, "
      "int[] shape, int blocksize, str type, ScalarType dtype) -> Tensor");
  m.def("quantize_8bit_blockwise(Tensor values) -> (Tensor codes, Tensor absmax)");
}

TORCH_LIBRARY_IMPL(kubetune, CPU, m) {
  m.impl("quantize_4bit", [](const torch::Tensor& w, int64_t blocksize, c10::string_view type) {
    return quantize_4bit_cpu(w, blocksize, std::string(type));
  });
  m.impl("dequantize_4bit",
         [](const torch::Tensor& packed, const torch::Tensor& absmax,
            const c10::optional<torch::Tensor>& nested, double offset, c10::IntArrayRef shape,
            int64_t blocksize, c10::string_view type, c10::ScalarType dtype) {
           return dequantize_4bit_cpu(packed, absmax, nested, offset, shape, blocksize,
                                      std::string(type), dtype);
         });
  m.impl("quantize_8bit_blockwise", quantize_8bit_blockwise_cpu);
}

}  // namespace kubetune::kernels
