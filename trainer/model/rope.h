// Rotary position embeddings, computed exactly as transformers does (same fp32 op sequence), so
// logits match to float rounding.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "trainer/model/model_config.h"

namespace kubetune::model {

// Inverse frequencies [head_dim/2], fp32 on CPU. `seq_len` only matters for "dynamic" scaling,
// which grows the base once a batch runs past max_position_embeddings (HF's dynamic_rope_update
// for a fresh model).
at::Tensor rope_inv_freq(const ModelConfig& c, int64_t seq_len = 0);

// cos and sin [B,T,head_dim] in `dtype` for position_ids [B,T]; computed in fp32 then cast.
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq,
                                               const at::Tensor& position_ids,
                                               at::ScalarType dtype);

// x [B,heads,T,head_dim] rotated with the rotate_half convention.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace kubetune::model
