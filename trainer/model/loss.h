// Next-token cross-entropy without materialising [B,T,vocab] logits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace kubetune::model {

class CausalLMImpl;

// Sum (not mean) of next-token cross-entropy over positions whose label != -100. labels [B,T]
// int64 in the HF convention (same length as input_ids; position t predicts labels[t+1]: the
// shift happens here). Pass labels on the host when you can: target rows are picked there, so the
// GPU queue never waits. Only target rows get logits, `chunk_rows` at a time; the logits matmul
// runs in autocast's dtype when autocast is on (like HF's lm_head), the softmax in fp32. Under
// grad mode the gradients are computed in the same pass, while each chunk's logits exist, and
// backward only scales them: memory stays O(chunk_rows * vocab), and the logits are made once.
// Returns {loss_sum (0-dim fp32, differentiable), n_targets}.
// Rows per chunk so that one chunk's logits (2 bytes each, bf16) take at most `budget_bytes`: a
// multiple of 256 from 256 to 4096 (larger chunks make the products no faster).
int64_t loss_chunk_rows(int64_t vocab, int64_t budget_bytes);

std::pair<at::Tensor, int64_t> next_token_loss_sum(CausalLMImpl& model, const at::Tensor& hidden,
                                                   const at::Tensor& labels,
                                                   int64_t chunk_rows = 4096);

// Per row: the sum of log p(target) over the row's targets (labels != -100, shifted as above),
// [B] fp32 and differentiable, and the row's target count ([B] int64, on the host). What the
// preference objectives compare (TRL's per-sequence log-probabilities). Forward keeps no logits;
// backward recomputes each chunk's logits once, since a row's gradient weight is only known when
// the objective has seen every row.
std::pair<at::Tensor, at::Tensor> sequence_log_probs(CausalLMImpl& model, const at::Tensor& hidden,
                                                     const at::Tensor& labels,
                                                     int64_t chunk_rows = 4096);

}  // namespace kubetune::model
