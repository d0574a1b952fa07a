// Attention with a sink logit per head (gpt-oss: family.h, attention_sinks). Each head's sink
// joins every row's softmax as one more column and takes its share of the weight, attending to
// nothing; so the output is ordinary attention's scaled by the share the real keys keep,
//
//   out = softmax([s, sink]) [V; 0] = attention(q, k, v) * exp(lse - logaddexp(lse, sink)),
//
// lse being the row's log-sum-exp over the real keys; and backward is ordinary attention's
// backward given that rescaled output and the log-sum-exp with the sink in it.
#pragma once

#include <torch/types.h>

namespace kubetune::model {

// Which keys each query may see (AttentionInputs' fields, layers.h).
struct SinkAttentionMask {
  torch::Tensor mask;      // bool [B,1,T,T] (true = may attend); undefined: plain causal
  int64_t window = 0;      // the sliding window the mask holds (0: none)
  bool segmented = false;  // the mask also keeps packed segments apart
};

// q [B,H,T,D]; k and v [B,Hkv,T,D] (grouped-query: each of their heads serves H / Hkv of q's);
// sinks [H]. On a GPU, without dropout: bf16/fp16 rows that are not packed go through the flash
// kernel (grouped heads and the window read by the kernel, blocks outside the window skipped);
// packed rows and fp32 through the memory-efficient kernel with the mask as an additive bias.
// Elsewhere transformers' eager_attention_forward, written out.
torch::Tensor attention_with_sinks(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const SinkAttentionMask& mask,
                                   const torch::Tensor& sinks, double scale, double dropout,
                                   bool training);

// transformers' eager_attention_forward of gpt-oss: the reference of the fused paths (tests).
torch::Tensor attention_with_sinks_reference(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, const torch::Tensor& mask,
                                             const torch::Tensor& sinks, double scale,
                                             double dropout, bool training);

}  // namespace kubetune::model
