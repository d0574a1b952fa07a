// Attention with a sink logit per head (gpt-oss: family.h, attention_sinks). Each head's sink
// joins every row's softmax as one more column and takes its share of the weight, attending to
// nothing; so the output is ordinary attention's scaled by the share the real keys keep:
//
//   out = softmax([s, sink]) [V; 0] = attention(q, k, v) * sigmoid(lse - sink)
//
// where lse is the row's log-sum-exp over the real keys.
#pragma once

#include <torch/types.h>

namespace kubetune::model {

// q [B,H,T,D]; k and v with their heads already repeated to H; mask bool [B,1,T,T] (true = may
// attend) or undefined for plain causal attention; sinks [H]. On a GPU (without dropout) the
// memory-efficient attention kernel computes the attention and its log-sum-exp, the sink
// rescales both, and backward hands the kernel the rescaled output and the log-sum-exp with the
// sink in it, which is backward with the sink as one more key (the scores are never
// materialised). Elsewhere transformers' eager_attention_forward, written out.
torch::Tensor attention_with_sinks(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& mask,
                                   const torch::Tensor& sinks, double scale, double dropout,
                                   bool training);

// transformers' eager_attention_forward of gpt-oss, the reference of the fused path (tests).
torch::Tensor attention_with_sinks_reference(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, const torch::Tensor& mask,
                                             const torch::Tensor& sinks, double scale,
                                             double dropout, bool training);

}  // namespace kubetune::model
