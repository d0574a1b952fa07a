// cos and sin [B, T, D] as a model makes them for random positions: positions times the RoPE
// frequencies of `base`, both halves of the last dimension equal (transformers' layout).
#pragma once

#include <torch/torch.h>

#include <utility>

namespace kubetune::kernels {

inline std::pair<torch::Tensor, torch::Tensor> rotation_tables(int64_t B, int64_t T, int64_t D,
                                                               double base) {
  auto positions = torch::randint(0, 4096, {B, T}).to(torch::kFloat32);
  auto inv_freq = torch::pow(base, -torch::arange(0, D, 2).to(torch::kFloat32) / D);
  auto freqs = positions.unsqueeze(-1) * inv_freq;
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos(), emb.sin()};
}

}  // namespace kubetune::kernels
