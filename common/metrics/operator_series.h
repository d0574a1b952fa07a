#pragma once

#include <array>
#include <string_view>

#include "common/metrics/series_spec.h"

// The metrics the FineTuneJob operator exports on its /metrics endpoint.
//
// kubetune_operator_jobs is a state set (like kube-state-metrics' kube_pod_status_phase): one
// series per job and phase, 1 for the job's current phase and 0 for the others. That gives both
// per-job alerts (phase="Failed" == 1) and counts per phase (sum by (phase)).
// Like the trainer's, the `job` label collides with Prometheus' target label: scrape the operator
// with honor_labels: true.
namespace kubetune::metrics::operator_series {

inline constexpr std::string_view kReconcileTotal = "kubetune_operator_reconcile_total";
inline constexpr std::string_view kReconcileDurationSeconds =
    "kubetune_operator_reconcile_duration_seconds";
inline constexpr std::string_view kWorkqueueDepth = "kubetune_operator_workqueue_depth";
inline constexpr std::string_view kJobs = "kubetune_operator_jobs";
inline constexpr std::string_view kJobRestartsTotal = "kubetune_operator_job_restarts_total";
inline constexpr std::string_view kJobProgressStep = "kubetune_operator_job_progress_step";
inline constexpr std::string_view kJobTotalSteps = "kubetune_operator_job_total_steps";
inline constexpr std::string_view kJobLoss = "kubetune_operator_job_loss";
inline constexpr std::string_view kJobTokensPerSecond = "kubetune_operator_job_tokens_per_second";
inline constexpr std::string_view kIsLeader = "kubetune_operator_is_leader";
// Gang scheduling: count(... > 0) is the number of jobs waiting for capacity, sum(...) the GPUs
// that partly scheduled gangs hold while they wait.
inline constexpr std::string_view kJobUnscheduledWorkers =
    "kubetune_operator_job_unscheduled_workers";
inline constexpr std::string_view kJobIdleHeldGpus = "kubetune_operator_job_idle_held_gpus";
inline constexpr std::string_view kJobGangReleasesTotal =
    "kubetune_operator_job_gang_releases_total";
inline constexpr std::string_view kJobEvictionsTotal = "kubetune_operator_job_evictions_total";
// Requests to the API server (watches not counted), by verb and HTTP status ("0": no answer):
// rate() is the operator's load on the API server; the client holds it under --kube-api-qps.
inline constexpr std::string_view kApiRequestsTotal = "kubetune_operator_api_requests_total";

// Values of the `result` label of kubetune_operator_reconcile_total.
inline constexpr std::array<std::string_view, 3> kReconcileResults = {"success", "error",
                                                                      "requeue"};
// Values of the `phase` label of kubetune_operator_jobs: every FineTuneJob status phase (the
// series is a state set over them). The alert rules use "Failed" and "Running".
inline constexpr std::array<std::string_view, 8> kJobPhases = {
    "Pending", "Queued", "Created", "Running", "Restarting", "Suspended", "Succeeded", "Failed"};

inline constexpr std::array<double, 12> kReconcileDurationBuckets = {
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

inline constexpr std::array<SeriesSpec, 15> kAll = {{
    {kReconcileTotal, MetricType::kCounter, "Reconciliations by result.", "result"},
    {kReconcileDurationSeconds, MetricType::kHistogram, "Time one reconciliation took.", ""},
    {kWorkqueueDepth, MetricType::kGauge, "FineTuneJobs waiting to be reconciled.", ""},
    {kJobs, MetricType::kGauge,
     "1 for the current phase of each FineTuneJob, 0 for its other phases.", "namespace,job,phase"},
    {kJobRestartsTotal, MetricType::kCounter, "Times the operator restarted the job's workers.",
     "namespace,job"},
    {kJobProgressStep, MetricType::kGauge, "Optimizer step last read from the job's rank 0.",
     "namespace,job"},
    {kJobTotalSteps, MetricType::kGauge, "Optimizer steps the job will take in total.",
     "namespace,job"},
    {kJobLoss, MetricType::kGauge, "Training loss last read from the job's rank 0.",
     "namespace,job"},
    {kJobTokensPerSecond, MetricType::kGauge,
     "Tokens per second of the whole job, last read from rank 0.", "namespace,job"},
    {kIsLeader, MetricType::kGauge, "1 if this operator replica holds the leader lease.", ""},
    {kJobUnscheduledWorkers, MetricType::kGauge,
     "Worker pods of the job's current gang that the scheduler could not place.", "namespace,job"},
    {kJobIdleHeldGpus, MetricType::kGauge,
     "GPUs held by the bound workers of a partly scheduled gang, idle until the rest is placed.",
     "namespace,job"},
    {kJobGangReleasesTotal, MetricType::kCounter,
     "Partly scheduled gangs deleted at runPolicy.schedulingTimeoutSeconds to free their GPUs.",
     "namespace,job"},
    {kJobEvictionsTotal, MetricType::kCounter,
     "Times Kueue evicted the job's admitted gang (preemption, deactivation).", "namespace,job"},
    {kApiRequestsTotal, MetricType::kCounter,
     "Requests to the API server (not watches), by verb and HTTP status (0: no answer).",
     "verb,code"},
}};

}  // namespace kubetune::metrics::operator_series
