// Rank 0's progress, as the reconciler watches it while every worker runs: read from its
// Prometheus endpoint at most once a progress period into status.progress and
// status.lastCheckpoint, out-of-memory recoveries counted once each (events), and the stall
// watchdog, which acts only on a gang whose metrics the operator has reached.
#include <spdlog/spdlog.h>

#include <cmath>

#include "operator/controller/reconcile_pass.h"
#include "operator/policy/gang_policy.h"
#include "operator/policy/progress.h"

namespace kubetune::op {

using nlohmann::json;

void JobReconciler::update_progress(Pass& p, const k8s::Pod& pod0) {
  {
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    auto& last = scrapes_[p.key].last;
    const auto now = std::chrono::steady_clock::now();
    if (last.time_since_epoch().count() != 0 && now - last < options_.progress_period) return;
    last = now;
  }
  const std::string ip = pod0.status.pod_ip.value_or("");
  if (ip.empty()) return;
  const std::string url =
      "http://" + ip + ":" + std::to_string(p.job.spec.metrics.port) + "/metrics";
  Progress pr;
  try {
    pr = scrape_progress(url, options_.scrape_timeout_ms);
  } catch (const std::exception& e) {
    spdlog::warn("{}: cannot read progress: {}", p.key, e.what());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    scrapes_[p.key].answered = p.now;
  }
  api::Progress& progress = p.status.progress;
  const json before = progress;
  const int world = p.job.spec.workers.replicas * std::max(1, p.job.spec.workers.gpus_per_worker);
  auto put = [](std::optional<double>& field, const std::optional<double>& v, double scale = 1) {
    if (v && std::isfinite(*v)) field = *v * scale;
  };
  const auto step = pr.step ? std::optional<int64_t>(static_cast<int64_t>(*pr.step)) : std::nullopt;
  if (step && (!progress.step_time || progress.step != step)) {
    progress.step_time = format_time(p.now);  // the stall watchdog's clock
  }
  if (step) progress.step = step;
  if (pr.total_steps) progress.total_steps = static_cast<int64_t>(*pr.total_steps);
  put(progress.epoch, pr.epoch);
  put(progress.loss, pr.loss);
  put(progress.reward_accuracy, pr.reward_accuracy);
  put(progress.reward_margin, pr.reward_margin);
  put(progress.tokens_per_second, pr.tokens_per_second, world);  // rank 0's rate x world size
  put(progress.eta_seconds, pr.eta_seconds);
  if (progress.eta_seconds) progress.eta = format_duration(*progress.eta_seconds);
  if (pr.micro_batch_size) progress.micro_batch_size = static_cast<int64_t>(*pr.micro_batch_size);
  // The counter is the gang's (a restarted gang starts from 0): each rise is one more recovery.
  if (pr.out_of_memory_recoveries) {
    const auto now_seen = static_cast<int64_t>(*pr.out_of_memory_recoveries);
    const int64_t before_seen =
        scraped_recoveries(p.key, kube::uid_of(pod0.metadata), now_seen,
                           progress.out_of_memory_recoveries.value_or(0) > 0);
    if (now_seen > before_seen) {
      progress.out_of_memory_recoveries =
          progress.out_of_memory_recoveries.value_or(0) + (now_seen - before_seen);
      p.events.push_back({"Warning", Reason::kOutOfMemoryRecovered,
                          "a step ran out of GPU memory; the workers re-ran it at micro-batch " +
                              std::to_string(progress.micro_batch_size.value_or(0)) +
                              " with the same global batch (" +
                              std::to_string(*progress.out_of_memory_recoveries) + " so far)"});
    }
  }
  progress.summary = std::to_string(progress.step.value_or(0)) + "/" +
                     std::to_string(progress.total_steps.value_or(0));
  if (json(progress) != before) progress.update_time = format_time(p.now);
  api::LastCheckpoint& last = p.status.last_checkpoint;
  if (pr.checkpoints && *pr.checkpoints > static_cast<double>(last.count.value_or(0))) {
    last.count = static_cast<int64_t>(*pr.checkpoints);
    last.step = progress.step.value_or(0);
    last.path = checkpoint_dir(p.job.spec);
    last.time = format_time(p.now);
  }
  if (metrics_) {
    metrics_->set_progress(p.ns, p.name, static_cast<double>(progress.step.value_or(0)),
                           static_cast<double>(progress.total_steps.value_or(0)),
                           progress.loss.value_or(0), progress.tokens_per_second.value_or(0));
  }
}

int64_t JobReconciler::scraped_recoveries(const std::string& key, const std::string& gang,
                                          int64_t now, bool status_counts_some) {
  std::lock_guard<std::mutex> lock(scrape_mutex_);
  Scrapes& scrapes = scrapes_[key];
  int64_t before = 0;  // a new gang's counter starts again
  if (scrapes.recoveries_gang == gang) {
    before = scrapes.recoveries.value_or(0);
  } else if (scrapes.recoveries_gang.empty() && status_counts_some) {
    before = now;  // the operator restarted: the status already counts what it saw before
  }
  scrapes.recoveries_gang = gang;
  scrapes.recoveries = now;
  return before;
}

std::optional<WorkerFailure> JobReconciler::stalled(const Pass& p) {
  const long timeout = p.job.spec.run_policy.stall_timeout_seconds;
  if (timeout <= 0) return std::nullopt;
  // The clock starts when the gang last became Running or when the step last advanced, whichever
  // is later: loading the model counts, a restarted gang starts afresh.
  const Condition* running = find_condition(p.status.conditions, ConditionType::kRunning);
  if (!running || running->status != api::ConditionStatus::kTrue) return std::nullopt;
  SystemTime since = parse_time(running->last_transition_time);
  {
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    const auto scrapes = scrapes_.find(p.key);
    if (scrapes == scrapes_.end() || scrapes->second.answered < since) return std::nullopt;
  }
  const api::Progress& progress = p.status.progress;
  if (progress.step_time) since = std::max(since, parse_time(*progress.step_time));
  if (p.now - since < std::chrono::seconds(timeout)) return std::nullopt;
  return stalled_failure(timeout, progress.step);
}

}  // namespace kubetune::op
