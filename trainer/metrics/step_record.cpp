#include "trainer/metrics/step_record.h"

namespace kubetune::metrics {

nlohmann::json step_record(const train::StepStats& s) {
  nlohmann::json line = {{"step", s.step},
                         {"epoch", s.epoch},
                         {"loss", s.loss},
                         {"learning_rate", s.learning_rate},
                         {"grad_norm", s.grad_norm},
                         {"tokens_per_second", s.tokens_per_second},
                         {"global_tokens", s.global_tokens},
                         {"step_seconds", s.step_seconds},
                         {"data_seconds", s.data_seconds},
                         {"forward_backward_seconds", s.forward_backward_seconds},
                         {"allreduce_wait_seconds", s.allreduce_wait_seconds},
                         {"optimizer_seconds", s.optimizer_seconds},
                         {"elapsed_seconds", s.elapsed_seconds}};
  // A mixture of experts: this rank's tokens per expert (an array: TensorBoard takes numbers only).
  if (!s.expert_tokens.empty()) line["expert_tokens"] = s.expert_tokens;
  // A preference objective: TRL's metrics under TRL's names (TensorBoard: train/rewards/chosen).
  if (const auto& p = s.preference) {
    const auto put = [&](const char* key, const std::optional<double>& value) {
      if (value) line[key] = *value;
    };
    put("rewards/chosen", p->rewards_chosen);
    put("rewards/rejected", p->rewards_rejected);
    put("rewards/margins", p->rewards_margins);
    put("rewards/accuracies", p->rewards_accuracies);
    put("logps/chosen", p->logps_chosen);
    put("logps/rejected", p->logps_rejected);
    put("kl", p->kl);
  }
  if (s.has_device_memory) {
    line["gpu_memory_allocated_bytes"] = s.device_memory.allocated;
    line["gpu_memory_peak_bytes"] = s.device_memory.peak;
    line["gpu_memory_reserved_bytes"] = s.device_memory.reserved;
  }
  return line;
}

nlohmann::json eval_record(int64_t step, double eval_loss) {
  return {{"step", step}, {"eval_loss", eval_loss}};
}

}  // namespace kubetune::metrics
