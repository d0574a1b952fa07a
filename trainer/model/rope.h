// Rotary position embeddings, computed exactly as transformers does (same fp32 op sequence), so
// logits match to float rounding.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

#include "trainer/model/model_config.h"

namespace kubetune::model {

// Inverse frequencies [rotated dims / 2] of `rope` (one of c's: c.rope or c.local_rope), fp32 on
// CPU. `seq_len` matters only where the frequencies depend on the batch: "dynamic" grows the base
// once a batch runs past max_position_embeddings, and "longrope" switches from its short to its
// long factors past original_max_position_embeddings (HF's dynamic_rope_update for a fresh model).
at::Tensor rope_inv_freq(const ModelConfig& c, const Rope& rope, int64_t seq_len = 0);
// Whether rope_inv_freq depends on seq_len.
bool rope_depends_on_length(const Rope& rope);

// cos and sin [B,T,rotated dims] in `dtype` for position_ids [B,T]; computed in fp32, times the
// rope's attention_factor (longrope), then cast. inv_freq on the host, as rope_inv_freq makes it.
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq,
                                               const at::Tensor& position_ids, at::ScalarType dtype,
                                               double attention_factor = 1);

// x [B,heads,T,head_dim] rotated with the rotate_half convention; with cos and sin narrower than
// the head (partial rotary), only the head's first cos.size(-1) dimensions are rotated.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace kubetune::model
