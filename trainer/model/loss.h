// Next-token cross-entropy without materialising [B,T,vocab] logits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace kubetune::model {

class CausalLMImpl;

// Sum (not mean) of next-token cross-entropy over positions whose label != -100. labels [B,T]
// int64 in the HF convention (same length as input_ids; position t predicts labels[t+1]: the
// shift happens here). Only target rows get logits, `chunk_rows` at a time; the softmax runs in
// fp32 (the logits matmul runs in the weight's dtype, like HF before its upcast). Backward
// recomputes each chunk's logits, so memory stays O(chunk_rows * vocab).
// Returns {loss_sum (0-dim fp32, differentiable), n_targets}.
std::pair<at::Tensor, int64_t> next_token_loss_sum(CausalLMImpl& model, const at::Tensor& hidden,
                                                   const at::Tensor& labels,
                                                   int64_t chunk_rows = 4096);

}  // namespace kubetune::model
