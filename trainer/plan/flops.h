// Model FLOPs: what the log's MFU is measured against, and what the preflight's time estimate
// divides by.
#pragma once

#include "common/train_config.h"
#include "trainer/model/model_config.h"

namespace kubetune::train {

// Dense bf16 peak of the H100/H200 (SXM), the GPUs we run on; MFU is reported against it.
inline constexpr double kPeakBf16FlopsPerSecond = 989e12;

// Attention's FLOPs per token by PaLM's convention: 12 x layers x width x length (no causal mask).
inline double attention_flops_per_token(const TrainConfig& c, const model::ModelConfig& mc) {
  return 12.0 * mc.num_hidden_layers * mc.num_attention_heads * mc.head_dim * c.data.max_length;
}

// Model FLOPs per trained token (PaLM's MFU convention): 6N for full fine-tuning, 4N for LoRA
// (no weight gradients for the frozen matrices), plus attention's. N counts the parameters a
// token is computed with: a mixture of experts' active ones.
inline double model_flops_per_token(const TrainConfig& c, const model::ModelConfig& mc) {
  return (c.method.type == api::MethodType::kFull ? 6.0 : 4.0) *
             static_cast<double>(mc.active_parameters()) +
         attention_flops_per_token(c, mc);
}

// What a step runs per token, for the preflight's time estimate: as above, but with the attention
// term halved, because the flash kernels skip the causal mask's upper half. At 2048 tokens the two
// differ by 5-8%; at 262144 tokens of Llama-3.1-8B attention is most of the work and the convention
// would double the estimate (393 s a step against 182 s measured; now 210 s).
inline double executed_flops_per_token(const TrainConfig& c, const model::ModelConfig& mc) {
  return model_flops_per_token(c, mc) - attention_flops_per_token(c, mc) / 2;
}

}  // namespace kubetune::train
