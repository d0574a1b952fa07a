#include "trainer/model/rope.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "trainer/model/device_copy.h"

namespace kubetune::model {
namespace {

// Python's `scalar / tensor` is `tensor.reciprocal() * scalar`; we mirror that so the fp32
// rounding is identical to transformers.
at::Tensor rdiv(double scalar, const at::Tensor& t) { return t.reciprocal() * scalar; }

// 0, 2/dim, 4/dim, ... in fp32: each rotated pair's exponent of the RoPE base, as transformers
// computes it (torch.arange(0, dim, 2).float() / dim).
at::Tensor rotation_exponents(int64_t dim) {
  return at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
}

at::Tensor default_inv_freq(double base, int64_t dim) {
  const at::Tensor exponents = rotation_exponents(dim);
  return rdiv(1.0, at::pow(base, exponents));
}

// transformers' _compute_llama3_parameters: long wavelengths are divided by `factor`, short
// ones are kept, and the band between is interpolated smoothly.
at::Tensor llama3_inv_freq(const Rope& s, int64_t dim) {
  at::Tensor inv_freq = default_inv_freq(s.theta, dim);
  const double old_len = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_len / s.low_freq_factor;
  const double high_freq_wavelen = old_len / s.high_freq_factor;
  at::Tensor wavelen = rdiv(2 * M_PI, inv_freq);
  at::Tensor llama = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  at::Tensor smooth =
      (rdiv(old_len, wavelen) - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * llama / s.factor + smooth * llama;
  at::Tensor medium =
      (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
  return at::where(medium, smoothed, llama);
}

// transformers' _compute_dynamic_ntk_parameters: the base grows once seq_len exceeds
// max_position_embeddings (computed with fp32 tensors there, so here too).
at::Tensor dynamic_inv_freq(const ModelConfig& c, const Rope& rope, int64_t dim, int64_t seq_len) {
  const double factor = rope.factor;
  at::Tensor len = at::scalar_tensor(std::max(seq_len, c.max_position_embeddings), at::kLong);
  at::Tensor ratio = (len * factor / static_cast<double>(c.max_position_embeddings)) - (factor - 1);
  at::Tensor base = rope.theta * ratio.pow(static_cast<double>(dim) / (dim - 2));
  const at::Tensor exponents = rotation_exponents(dim);
  return rdiv(1.0, at::pow(base, exponents));
}

// transformers' _compute_longrope_parameters: the default frequencies divided by one factor per
// frequency, the short ones up to original_max_position_embeddings, the long ones beyond.
at::Tensor longrope_inv_freq(const Rope& rope, int64_t dim, int64_t seq_len) {
  const bool long_context = seq_len > rope.original_max_position_embeddings;
  const std::vector<double>& factors = long_context ? rope.long_factor : rope.short_factor;
  at::Tensor ext = at::tensor(factors, at::kDouble).to(at::kFloat);
  const at::Tensor exponents = rotation_exponents(dim);
  return rdiv(1.0, ext * at::pow(rope.theta, exponents));
}

// transformers' _compute_yarn_parameters: each frequency between the interpolated one (divided
// by factor) and the original, by a linear ramp over the dimensions whose wavelengths fit
// between beta_fast and beta_slow rotations in original_max_position_embeddings.
at::Tensor yarn_inv_freq(const Rope& rope, int64_t dim) {
  const double original = static_cast<double>(rope.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(rope.theta));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0), high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // as transformers: no division by zero
  const at::Tensor pos_freqs = at::pow(rope.theta, rotation_exponents(dim));
  at::Tensor extrapolation = pos_freqs.reciprocal();
  at::Tensor interpolation = (pos_freqs * rope.factor).reciprocal();
  at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
  at::Tensor extrapolation_share = 1 - ramp;
  return interpolation * (1 - extrapolation_share) + extrapolation * extrapolation_share;
}

}  // namespace

bool rope_depends_on_length(const Rope& rope) {
  return rope.type == "dynamic" || rope.type == "longrope";
}

at::Tensor rope_inv_freq(const ModelConfig& c, const Rope& rope, int64_t seq_len) {
  const int64_t dim = c.rotary_dim(rope);
  const std::string& type = rope.type;
  if (type == "llama3") return llama3_inv_freq(rope, dim);
  if (type == "linear") return default_inv_freq(rope.theta, dim) / rope.factor;
  if (type == "dynamic") return dynamic_inv_freq(c, rope, dim, seq_len);
  if (type == "longrope") return longrope_inv_freq(rope, dim, seq_len);
  if (type == "yarn") return yarn_inv_freq(rope, dim);
  return default_inv_freq(rope.theta, dim);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq,
                                               const at::Tensor& position_ids, at::ScalarType dtype,
                                               double attention_factor) {
  // Copied without a blocking copy's wait: that would drain the GPU's queue at every forward, and
  // the host would then launch the layers' kernels with the GPU idle behind it.
  at::Tensor freqs = position_ids.unsqueeze(-1).to(at::kFloat) *
                     to_device_async(inv_freq.to(at::kFloat), position_ids.device());
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  if (attention_factor == 1) return {emb.cos().to(dtype), emb.sin().to(dtype)};
  return {(emb.cos() * attention_factor).to(dtype), (emb.sin() * attention_factor).to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t rotary = cos.size(-1);
  if (rotary < x.size(-1)) {  // partial rotary: the rest of each head passes through
    return at::cat(
        {apply_rope(x.narrow(-1, 0, rotary), cos, sin), x.narrow(-1, rotary, x.size(-1) - rotary)},
        -1);
  }
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace kubetune::model
