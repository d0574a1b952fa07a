#pragma once

#include <array>
#include <string_view>

#include "common/metrics/series_spec.h"

// The metrics every trainer rank exports on its /metrics endpoint. The trainer registers exactly
// these (name, type, help, labels); the dashboard, the alert rules and the operator read them.
//
// Label values: job = FineTuneJob name, rank = global rank, local_rank = rank on the node,
// device = "cuda:<index>". Note that `job` collides with Prometheus' own target label "job":
// scrape trainer pods with honor_labels: true (ServiceMonitor/PodMonitor: honorLabels: true) so
// the exported value wins. The scrape is expected to add a `namespace` target label.
namespace kubetune::metrics::trainer_series {

inline constexpr std::string_view kTrainLoss = "kubetune_train_loss";
inline constexpr std::string_view kEvalLoss = "kubetune_eval_loss";
inline constexpr std::string_view kLearningRate = "kubetune_learning_rate";
inline constexpr std::string_view kGradNorm = "kubetune_grad_norm";
inline constexpr std::string_view kTokensPerSecond = "kubetune_tokens_per_second";
inline constexpr std::string_view kSamplesPerSecond = "kubetune_samples_per_second";
inline constexpr std::string_view kTokensTotal = "kubetune_tokens_total";
inline constexpr std::string_view kSamplesTotal = "kubetune_samples_total";
inline constexpr std::string_view kStepSeconds = "kubetune_step_seconds";
inline constexpr std::string_view kStepPhaseSecondsTotal = "kubetune_step_phase_seconds_total";
inline constexpr std::string_view kGpuMemoryAllocatedBytes = "kubetune_gpu_memory_allocated_bytes";
inline constexpr std::string_view kGpuMemoryReservedBytes = "kubetune_gpu_memory_reserved_bytes";
inline constexpr std::string_view kGpuMemoryPeakBytes = "kubetune_gpu_memory_peak_bytes";
inline constexpr std::string_view kGpuMemoryTotalBytes = "kubetune_gpu_memory_total_bytes";
inline constexpr std::string_view kMfuRatio = "kubetune_mfu_ratio";
inline constexpr std::string_view kStep = "kubetune_step";
inline constexpr std::string_view kTotalSteps = "kubetune_total_steps";
inline constexpr std::string_view kEpoch = "kubetune_epoch";
inline constexpr std::string_view kEtaSeconds = "kubetune_eta_seconds";
inline constexpr std::string_view kCheckpointsTotal = "kubetune_checkpoints_total";
inline constexpr std::string_view kCollectiveTimeoutsTotal = "kubetune_collective_timeouts_total";
inline constexpr std::string_view kMicroBatchSize = "kubetune_micro_batch_size";
inline constexpr std::string_view kOutOfMemoryRecoveriesTotal =
    "kubetune_out_of_memory_recoveries_total";
inline constexpr std::string_view kExpertTokensTotal = "kubetune_expert_tokens_total";
inline constexpr std::string_view kPreferenceRewardAccuracy = "kubetune_preference_reward_accuracy";
inline constexpr std::string_view kPreferenceRewardMargin = "kubetune_preference_reward_margin";
inline constexpr std::string_view kPreferenceReward = "kubetune_preference_reward";
inline constexpr std::string_view kPreferenceLogProb = "kubetune_preference_log_prob";
inline constexpr std::string_view kPreferenceKl = "kubetune_preference_kl";

// Values of the `phase` label of kubetune_step_phase_seconds_total.
inline constexpr std::array<std::string_view, 4> kStepPhases = {"data_wait", "forward_backward",
                                                                "allreduce_wait", "optimizer"};

// Values of the `answer` label of kubetune_preference_reward and kubetune_preference_log_prob.
inline constexpr std::array<std::string_view, 2> kPreferenceAnswers = {"chosen", "rejected"};

// Buckets for kubetune_step_seconds: from small LoRA steps to large full fine-tuning steps.
inline constexpr std::array<double, 13> kStepSecondsBuckets = {0.05, 0.1, 0.25, 0.5, 1,   2,  5,
                                                               10,   20,  30,   60,  120, 300};

inline constexpr std::string_view kRankLabels = "job,rank,local_rank";

inline constexpr std::array<SeriesSpec, 29> kAll = {{
    {kTrainLoss, MetricType::kGauge, "Training loss of the last optimizer step.",
     "job,rank,local_rank"},
    {kEvalLoss, MetricType::kGauge, "Loss of the last evaluation pass.", "job,rank,local_rank"},
    {kLearningRate, MetricType::kGauge, "Learning rate used by the last optimizer step.",
     "job,rank,local_rank"},
    {kGradNorm, MetricType::kGauge, "Global gradient norm before clipping, last optimizer step.",
     "job,rank,local_rank"},
    {kTokensPerSecond, MetricType::kGauge,
     "Tokens (target and context) this rank trained per second over the last step.",
     "job,rank,local_rank"},
    {kSamplesPerSecond, MetricType::kGauge,
     "Samples this rank trained per second over the last step.", "job,rank,local_rank"},
    {kTokensTotal, MetricType::kCounter, "Tokens (target and context) trained by this rank.",
     "job,rank,local_rank"},
    {kSamplesTotal, MetricType::kCounter, "Samples trained by this rank.", "job,rank,local_rank"},
    {kStepSeconds, MetricType::kHistogram, "Wall-clock time of one optimizer step.",
     "job,rank,local_rank"},
    {kStepPhaseSecondsTotal, MetricType::kCounter,
     "Time spent per step phase (data_wait, forward_backward, allreduce_wait, optimizer).",
     "job,rank,local_rank,phase"},
    {kGpuMemoryAllocatedBytes, MetricType::kGauge, "GPU memory held by live tensors.",
     "job,rank,local_rank,device"},
    {kGpuMemoryReservedBytes, MetricType::kGauge, "GPU memory reserved by the caching allocator.",
     "job,rank,local_rank,device"},
    {kGpuMemoryPeakBytes, MetricType::kGauge, "Peak GPU memory allocated since the start.",
     "job,rank,local_rank,device"},
    {kGpuMemoryTotalBytes, MetricType::kGauge, "Total memory of the GPU.",
     "job,rank,local_rank,device"},
    {kMfuRatio, MetricType::kGauge,
     "Model FLOPs utilization: achieved model FLOP/s over the GPU peak, last step.",
     "job,rank,local_rank"},
    {kStep, MetricType::kGauge, "Current optimizer step (completed steps).", "job,rank,local_rank"},
    {kTotalSteps, MetricType::kGauge, "Optimizer steps the run will take in total.",
     "job,rank,local_rank"},
    {kEpoch, MetricType::kGauge, "Current epoch (fractional).", "job,rank,local_rank"},
    {kEtaSeconds, MetricType::kGauge, "Estimated seconds until the last step.",
     "job,rank,local_rank"},
    {kCheckpointsTotal, MetricType::kCounter, "Checkpoints written by this rank.",
     "job,rank,local_rank"},
    {kCollectiveTimeoutsTotal, MetricType::kCounter,
     "Collective operations (all-reduce, barrier) that timed out.", "job,rank,local_rank"},
    {kMicroBatchSize, MetricType::kGauge,
     "Examples per forward pass per process (training.microBatchSize, or what auto chose).",
     "job,rank,local_rank"},
    {kOutOfMemoryRecoveriesTotal, MetricType::kCounter,
     "Steps that ran out of GPU memory and were re-run at a smaller micro-batch.",
     "job,rank,local_rank"},
    {kExpertTokensTotal, MetricType::kCounter,
     "Mixture of experts: tokens this rank routed to each expert, summed over the sparse layers "
     "(an expert near zero is starving).",
     "job,rank,local_rank,expert"},
    {kPreferenceRewardAccuracy, MetricType::kGauge,
     "Preference objectives: share of the last step's pairs whose chosen answer has the higher "
     "reward (TRL's rewards/accuracies).",
     "job,rank,local_rank"},
    {kPreferenceRewardMargin, MetricType::kGauge,
     "Preference objectives: mean chosen minus rejected reward over the last step's pairs (TRL's "
     "rewards/margins).",
     "job,rank,local_rank"},
    {kPreferenceReward, MetricType::kGauge,
     "Preference objectives: mean reward of the last step's chosen or rejected answers (TRL's "
     "rewards/chosen, rewards/rejected).",
     "job,rank,local_rank,answer"},
    {kPreferenceLogProb, MetricType::kGauge,
     "Preference objectives: mean log-probability of the last step's chosen or rejected answers "
     "(TRL's logps/chosen, logps/rejected).",
     "job,rank,local_rank,answer"},
    {kPreferenceKl, MetricType::kGauge,
     "kto: the last step's KL estimate, the mean log-ratio to the reference of its prompts with "
     "each other's completions, at least 0 (TRL's kl).",
     "job,rank,local_rank"},
}};

}  // namespace kubetune::metrics::trainer_series
