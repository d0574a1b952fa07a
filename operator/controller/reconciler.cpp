#include "operator/controller/reconciler.h"

#include <spdlog/spdlog.h>

#include "operator/controller/reconcile_pass.h"
#include "operator/policy/conditions.h"
#include "operator/policy/gang.h"
#include "operator/policy/gang_policy.h"
#include "operator/policy/outputs.h"
#include "operator/render/desired_objects.h"

namespace kubetune::op {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// An object without a controlling owner, labelled as ours, and not a pod.
bool adoptable(const k8s::ObjectMeta& existing, const kube::Resource& kind) {
  if (kind.plural == kube::resources::kPods.plural) return false;
  if (kube::being_deleted(existing)) return false;
  for (const auto& ref : existing.owner_references) {
    if (ref.controller.value_or(false)) return false;
  }
  return kube::label(existing, kLabelManagedBy) == kManagerName;
}

// A Failed condition for a spec older than the object's: the user fixed an invalid spec.
bool invalid_spec_fixed(const api::FineTuneJobStatus& status, long generation) {
  const Condition* failed = find_condition(status.conditions, ConditionType::kFailed);
  return status.phase == Phase::kFailed && failed &&
         failed->reason == to_string(Reason::kInvalidSpec) &&
         failed->observed_generation.value_or(0) < generation;
}

}  // namespace

JobReconciler::JobReconciler(kube::KubeClient& client, kube::Informer& jobs, kube::Informer& pods,
                             kube::Informer* workloads, EventRecorder& events,
                             OperatorMetrics* metrics, ReconcilerOptions options)
    : client_(client),
      jobs_(jobs),
      pods_(pods),
      workloads_(workloads),
      events_(events),
      metrics_(metrics),
      options_(std::move(options)) {}

// Read, decide, store the status, then do what must follow the stored status.
ReconcileResult JobReconciler::reconcile(const std::string& key) {
  Pass p;
  if (!read(p, key)) return {};
  PassDecision decision;
  try {
    decision = decide(p);
  } catch (const ChildNotCreated&) {
    write_status(p);  // the Created condition says why; the queue retries with back-off
    throw;
  }
  if (decision.store) write_status(p);
  for (const auto& action : p.after_store) action();
  return decision.result;
}

bool JobReconciler::read(Pass& p, const std::string& key) {
  p.key = key;
  p.ns = key.substr(0, key.find('/'));
  p.name = key.substr(key.find('/') + 1);
  auto cached = jobs_.get(p.ns, p.name);
  if (!cached) {  // deleted: its objects go with it (ownerReferences); forget its series
    if (metrics_) metrics_->forget_job(p.ns, p.name);
    forget_scrapes(key);
    return false;
  }
  p.obj = *cached;
  p.metadata = kube::metadata_of(p.obj);
  if (kube::being_deleted(p.metadata)) return false;
  p.now = options_.clock();
  p.generation = p.metadata.generation.value_or(0);
  p.old_status = upgraded_job_status(p.obj);
  p.status = p.old_status;
  return true;
}

PassDecision JobReconciler::decide(Pass& p) {
  try {
    p.job = parse_job(p.obj);
  } catch (const SpecError& e) {
    return invalid_spec(p, e.problems());
  }
  if (invalid_spec_fixed(p.status, p.generation)) {
    p.status = {};  // start over
    p.events.push_back(
        {"Normal", Reason::kSpecAccepted, "the corrected spec is valid; starting the job"});
  }
  p.job.fetched_sources = p.status.sources;  // the workers read what the preflight fetched
  if (is_finished(p.phase())) return finished(p);
  if (p.job.spec.run_policy.suspend) return suspend(p);
  if (condition_is_true(p.status.conditions, ConditionType::kSuspended)) resume(p);
  if (!p.phase()) p.status.phase = Phase::kPending;
  if (!p.status.start_time) p.status.start_time = format_time(p.now);
  if (!p.status.restarts) p.status.restarts = 0;

  const auto& deadline_seconds = p.job.spec.run_policy.active_deadline_seconds;
  if (!deadline_seconds) return run_gang(p);
  const auto deadline = parse_time(*p.status.start_time) + std::chrono::seconds(*deadline_seconds);
  if (p.now >= deadline) {
    return fail(p, Reason::kDeadlineExceeded,
                "the job was active longer than runPolicy.activeDeadlineSeconds=" +
                    std::to_string(*deadline_seconds));
  }
  PassDecision d = run_gang(p);
  const auto left = until(p.now, deadline);
  if (d.result.requeue_after.count() == 0 || left < d.result.requeue_after) {
    d.result.requeue_after = left;
  }
  return d;
}

PassDecision JobReconciler::run_gang(Pass& p) {
  if (auto d = wait_after_release(p)) return *d;
  const int64_t attempt = p.status.restarts.value_or(0);
  const std::string hash = spec_hash(p.job.spec_json);
  std::vector<k8s::Pod> current;
  int older = 0;
  for (const auto& pod : gang_pods(p)) {
    const int a = attempt_of(pod);
    if (a > attempt) {
      // Pods of a newer gang than our job says: our job object is stale. Come back later.
      return {{kShortRequeue}, false};
    }
    // Pods made before pods carried a spec hash (an older operator) are left alone: an operator
    // upgrade must not restart every running job.
    const std::string pod_hash = spec_hash_of(pod);
    if (a < attempt || (!pod_hash.empty() && pod_hash != hash)) {
      ++older;
      // Made from another spec: the gang is replaced, which is not a failure to count.
      if (a == attempt) p.status.workers.created = 0;
      if (!kube::being_deleted(pod.metadata)) {
        client_.remove(kube::resources::kPods.item(p.ns, kube::name_of(pod.metadata)));
      }
    } else {
      current.push_back(pod);
    }
  }
  if (older > 0) return {{kShortRequeue}};  // the new gang starts when the old one is gone
  if (current.empty() && p.job.spec.run_policy.preflight) {
    if (auto d = preflight(p, hash)) return *d;
  }
  if (auto d = admit(p)) return *d;

  GangState g = assess_gang(current, p.job.spec.workers.replicas);
  const bool created = p.status.workers.created.value_or(0) >= p.job.spec.workers.replicas;
  if (!g.failure && created) {
    for (int rank : g.missing) {
      if (!confirm_lost(p, rank)) return {{kShortRequeue}, false};  // our pod cache is behind
      g.failure = WorkerFailure{
          rank, Reason::kWorkerLost,
          "worker " + std::to_string(rank) + " (pod " + pod_name(p.name, rank) + ") disappeared",
          false};
      break;
    }
  }
  p.status.workers.active = g.active();
  p.status.workers.succeeded = g.succeeded;
  p.status.workers.failed = g.failed;
  if (g.failure) return handle_failure(p, *g.failure);
  if (g.all_succeeded()) return succeed(p, g);

  if (!g.missing.empty()) create_gang(p, g.missing);
  ReconcileResult result;
  if (auto d = observe_scheduling(p, g)) {
    if (p.status.scheduling.next_attempt_time) return *d;  // released
    result = d->result;
  }
  if (g.all_running()) {
    transition(p, Phase::kRunning, ConditionType::kRunning, Reason::kAllWorkersRunning,
               "all " + std::to_string(g.replicas) + " workers are running", false);
    if (condition_is_true(p.status.conditions, ConditionType::kRestarting)) {
      set_condition(p.status.conditions, ConditionType::kRestarting, false, Reason::kGangRunning,
                    "the restarted gang is running", p.generation, p.now);
    }
    if (p.job.spec.metrics.port > 0) {
      update_progress(p, *g.pods[0]);
      // Rank 0's trainer has ended well and its publish container uploads: no step to wait for.
      if (!trainer_succeeded(*g.pods[0])) {
        if (auto stall = stalled(p)) return handle_failure(p, *stall);
      }
      if (result.requeue_after.count() == 0 || options_.progress_period < result.requeue_after) {
        result.requeue_after = options_.progress_period;
      }
    }
  }
  sync_pods_ready(p, g);
  return {result};
}

void JobReconciler::create_gang(Pass& p, const std::vector<int>& missing) {
  const int attempt = static_cast<int>(p.status.restarts.value_or(0));
  DesiredObjects want = desired_objects(p.job, attempt);
  for (const auto& name : p.flavors) {
    const auto flavor =
        client_.get(kube::resources::kResourceFlavors.item("", name)).get<k8s::ResourceFlavor>();
    for (auto& pod : want.pods) kueue::apply_flavor(pod, flavor);
  }
  create_children(p, [&] {
    ensure_config_map(p, want.config_map);
    if (want.service) ensure_child(p, kube::resources::kServices, *want.service);
    for (int rank : missing) ensure_child(p, kube::resources::kPods, want.pods[rank]);
  });
  p.status.workers.created = p.job.spec.workers.replicas;
  if (p.phase() != Phase::kRunning) {
    transition(p, Phase::kCreated, ConditionType::kCreated, Reason::kGangCreated,
               "created " + std::to_string(p.job.spec.workers.replicas) + " worker pods (gang " +
                   std::to_string(attempt) + ")",
               false);
  }
}

void JobReconciler::create_children(Pass& p, const std::function<void()>& create) {
  try {
    create();
  } catch (const ChildNotCreated& e) {
    const Condition* before = find_condition(p.status.conditions, ConditionType::kCreated);
    if (!before || before->reason != to_string(e.reason) || before->message != e.what()) {
      p.events.push_back({e.warning ? "Warning" : "Normal", e.reason, e.what()});
    }
    set_condition(p.status.conditions, ConditionType::kCreated, false, e.reason, e.what(),
                  p.generation, p.now);
    throw;
  }
}

std::optional<json> JobReconciler::ensure_child(Pass& p, const kube::Resource& kind,
                                                const json& object) {
  const auto want = object.get<k8s::PartialObjectMetadata>();
  const std::string name = kube::name_of(want.metadata);
  const std::string what = want.kind.value_or("object") + " " + name;
  try {
    client_.create(kind.collection(p.ns), object);
    return std::nullopt;
  } catch (const kube::ApiError& e) {
    if (e.code() == 0 || e.code() >= 500 || e.conflict()) throw;  // transient: retry as is
    if (!e.already_exists()) {
      throw ChildNotCreated(Reason::kFailedCreate, "cannot create " + what + ": " + e.what(), true);
    }
  }
  // It exists: from an earlier pass (idempotent), or someone else's under our name.
  json existing = client_.get(kind.item(p.ns, name));
  auto have = existing.get<k8s::PartialObjectMetadata>();
  if (!owned_by(have.metadata, p.uid()) && adoptable(have.metadata, kind)) {
    // A ConfigMap or Service left by a job deleted with --cascade=orphan: it holds nothing but
    // what the spec says, so it is taken over (as workload controllers adopt orphans) and
    // rewritten (ensure_config_map). A pod never is: it may be training another spec.
    have.metadata.owner_references = want.metadata.owner_references;
    existing = client_.update(kind.item(p.ns, name), have);
    have = existing.get<k8s::PartialObjectMetadata>();
    p.events.push_back({"Normal", Reason::kAdopted, "adopted the orphaned " + what});
  }
  if (!owned_by(have.metadata, p.uid())) {
    if (kube::being_deleted(have.metadata)) {
      throw ChildNotCreated(Reason::kWaitingForOldObjects,
                            what + " of an earlier FineTuneJob named " + p.name +
                                " is still being deleted; waiting for it to go",
                            false);
    }
    throw ChildNotCreated(Reason::kNameConflict,
                          what + " exists and is not owned by this FineTuneJob (uid " + p.uid() +
                              "); delete it so that the job can create its own",
                          true);
  }
  return existing;
}

void JobReconciler::ensure_config_map(Pass& p, const k8s::ConfigMap& config_map) {
  const std::optional<json> existing = ensure_child(p, kube::resources::kConfigMaps, config_map);
  if (!existing) return;  // just created
  auto have = existing->get<k8s::ConfigMap>();
  if (have.data == config_map.data) return;
  have.data = config_map.data;  // the spec was edited while suspended
  client_.update(kube::resources::kConfigMaps.item(p.ns, kube::name_of(config_map.metadata)), have);
}

bool JobReconciler::confirm_lost(Pass& p, int rank) {
  try {
    // Ours still exists: the cache is behind. Someone else's of that name: ours is gone.
    const json pod = client_.get(kube::resources::kPods.item(p.ns, pod_name(p.name, rank)));
    return !owned_by(kube::metadata_of(pod), p.uid());
  } catch (const kube::ApiError& e) {
    if (e.not_found()) return true;
    throw;
  }
}

PassDecision JobReconciler::handle_failure(Pass& p, const WorkerFailure& f) {
  const int64_t restarts = p.status.restarts.value_or(0);
  const GangDecision decision = next(f, restarts, p.job.spec.run_policy.backoff_limit);
  if (!decision.restart) return fail(p, decision.reason, decision.message);
  p.status.restarts = restarts + 1;
  p.status.workers.created = 0;
  const std::string& message = decision.message;
  transition(p, Phase::kRestarting, ConditionType::kRestarting, f.reason, message, true);
  set_condition(p.status.conditions, ConditionType::kRunning, false, f.reason, f.message,
                p.generation, p.now);
  // Once the restart is stored: if this pass is based on a stale job, the write fails with 409
  // and nothing is deleted, so the failure is counted once.
  p.after_store.push_back([this, &p] {
    if (metrics_) metrics_->restarted(p.ns, p.name);
  });
  delete_pods_after_store(p, true);
  return {{kShortRequeue}};
}

PassDecision JobReconciler::fail(Pass& p, Reason reason, const std::string& message) {
  p.status.completion_time = format_time(p.now);
  transition(p, Phase::kFailed, ConditionType::kFailed, reason, message, true);
  set_condition(p.status.conditions, ConditionType::kRunning, false, reason, message, p.generation,
                p.now);
  delete_pods_after_store(p, false);  // frees the GPUs; finished pods stay for their logs
  return {{ttl_requeue(p)}};
}

PassDecision JobReconciler::succeed(Pass& p, const GangState& g) {
  p.status.completion_time = format_time(p.now);
  p.status.outputs = job_outputs(p.job.spec, g.pods.front());
  const std::string message =
      "all " + std::to_string(p.job.spec.workers.replicas) + " workers completed successfully";
  transition(p, Phase::kSucceeded, ConditionType::kSucceeded, Reason::kCompleted, message, false);
  set_condition(p.status.conditions, ConditionType::kRunning, false, Reason::kCompleted, message,
                p.generation, p.now);
  return {{ttl_requeue(p)}};
}

PassDecision JobReconciler::invalid_spec(Pass& p, const std::vector<std::string>& problems) {
  const std::string message = "invalid spec: " + join(problems, "; ");
  const Condition* failed = find_condition(p.status.conditions, ConditionType::kFailed);
  if (p.phase() == Phase::kFailed && failed && failed->reason == to_string(Reason::kInvalidSpec) &&
      failed->message == message) {
    return {{}, false};
  }
  if (!p.status.completion_time) p.status.completion_time = format_time(p.now);
  transition(p, Phase::kFailed, ConditionType::kFailed, Reason::kInvalidSpec, message, true);
  if (p.old_status.phase == Phase::kFailed) {
    p.events.push_back({"Warning", Reason::kInvalidSpec, message});  // same phase, new problems
  }
  delete_pods_after_store(p, false);
  return {};
}

PassDecision JobReconciler::finished(Pass& p) {
  delete_pods(p, false);  // level-triggered clean-up after Failed
  forget_scrapes(p.key);  // nothing of a finished job is kept but what the caches hold
  // The status is stored only when something (e.g. the spec reset) changed; then Kueue's
  // Workload is marked Finished, which gives the quota back.
  p.after_store.push_back([this, &p] { sync_workload(p); });
  return {{ttl_requeue(p)}};
}

std::chrono::milliseconds JobReconciler::ttl_requeue(Pass& p) {
  const auto& ttl = p.job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl || !p.status.completion_time) return milliseconds(0);
  const auto expiry = parse_time(*p.status.completion_time) + std::chrono::seconds(*ttl);
  if (p.now < expiry) return until(p.now, expiry);
  p.after_store.push_back([this, &p, seconds = *ttl] {
    spdlog::info("deleting {}: ttlSecondsAfterFinished={} expired", p.key, seconds);
    client_.remove(p.item(), "Background");  // the garbage collector takes its pods
  });
  return milliseconds(0);
}

PassDecision JobReconciler::suspend(Pass& p) {
  const int left = delete_pods(p, true);
  p.status.workers.active = left;
  if (!condition_is_true(p.status.conditions, ConditionType::kSuspended)) {
    p.status.workers.created = 0;
    // Like a Kubernetes Job, the deadline clock restarts when the job resumes.
    p.status.start_time.reset();
    transition(p, Phase::kSuspended, ConditionType::kSuspended, Reason::kSuspended,
               "runPolicy.suspend is true: worker pods deleted", false);
    set_condition(p.status.conditions, ConditionType::kRunning, false, Reason::kSuspended,
                  "the job is suspended", p.generation, p.now);
    if (find_condition(p.status.conditions, ConditionType::kAdmitted)) {
      set_condition(p.status.conditions, ConditionType::kAdmitted, false, Reason::kSuspended,
                    "the job is suspended: its Workload is inactive and holds no quota",
                    p.generation, p.now);
    }
  }
  // Kueue: spec.active=false, then the quota back once the pods are gone.
  p.after_store.push_back([this, &p] { sync_workload(p); });
  return {{left > 0 ? kShortRequeue : milliseconds(0)}};
}

void JobReconciler::resume(Pass& p) {
  set_condition(p.status.conditions, ConditionType::kSuspended, false, Reason::kResumed,
                "runPolicy.suspend is false: recreating the workers, which resume from the last "
                "checkpoint",
                p.generation, p.now);
  p.status.phase = Phase::kPending;
  p.events.push_back(
      {"Normal", Reason::kResumed, "recreating the workers from the last checkpoint"});
}

void JobReconciler::transition(Pass& p, Phase phase, ConditionType condition, Reason reason,
                               const std::string& message, bool warning) {
  if (p.phase() != phase) {
    p.status.phase = phase;
    p.events.push_back({warning ? "Warning" : "Normal", reason, message});
  }
  set_condition(p.status.conditions, condition, true, reason, message, p.generation, p.now);
}

void JobReconciler::write_status(Pass& p) {
  p.status.observed_generation = p.generation;
  api::Scheduling& scheduling = p.status.scheduling;
  if (is_finished(p.phase()) || p.phase() == Phase::kSuspended || p.phase() == Phase::kQueued) {
    // No gang: nothing waits for a node. (releases and nextAttemptTime are history, kept.)
    scheduling.bound_workers.reset();
    scheduling.unscheduled_workers.reset();
    scheduling.held_gpus.reset();
    scheduling.partially_scheduled_since.reset();
  }
  if (json(p.status) != json(p.old_status)) {
    json obj = p.obj;
    set_job_status(obj, p.status);
    for (int attempt = 0;; ++attempt) {
      try {
        p.obj = client_.update_status(p.item(), obj);
        p.metadata = kube::metadata_of(p.obj);
        break;
      } catch (const kube::ApiError& e) {
        if (!e.conflict() || attempt >= 3) throw;
        // Retry only if nothing this pass relied on changed (e.g. someone added a label);
        // otherwise start over from the fresh object.
        json fresh = client_.get(p.item());
        if (kube::metadata_of(fresh).generation.value_or(0) != p.generation ||
            json(job_status(fresh)) != json(p.old_status)) {
          throw StaleObjectError(p.key + ": changed while reconciling; retrying");
        }
        obj = std::move(fresh);
        set_job_status(obj, p.status);
      }
    }
    p.old_status = p.status;
  }
  for (const auto& e : p.events) events_.record(p.obj, e.type, to_string(e.reason), e.message);
  p.events.clear();
  if (metrics_) {
    metrics_->set_phase(p.ns, p.name, p.phase());
    metrics_->set_scheduling(p.ns, p.name,
                             static_cast<int>(scheduling.unscheduled_workers.value_or(0)),
                             static_cast<int>(scheduling.held_gpus.value_or(0)));
  }
}

void JobReconciler::forget_scrapes(const std::string& key) {
  std::lock_guard<std::mutex> lock(scrape_mutex_);
  scrapes_.erase(key);
}

std::vector<k8s::Pod> JobReconciler::job_pods(const Pass& p) const {
  std::vector<k8s::Pod> out;
  for (const auto& object : pods_.list(p.ns, {{kLabelJob, p.name}})) {
    auto pod = object.get<k8s::Pod>();
    if (owned_by(pod.metadata, p.uid())) out.push_back(std::move(pod));
  }
  return out;
}

std::vector<k8s::Pod> JobReconciler::gang_pods(const Pass& p) const {
  std::vector<k8s::Pod> out;
  for (auto& pod : job_pods(p)) {
    if (kube::label(pod.metadata, kLabelRole) != kRolePreflight) out.push_back(std::move(pod));
  }
  return out;
}

int JobReconciler::delete_pods(Pass& p, bool all) {
  int left = 0;
  for (const auto& pod : job_pods(p)) {
    if (!all && is_terminal(pod)) continue;
    ++left;
    if (kube::being_deleted(pod.metadata)) continue;
    client_.remove(kube::resources::kPods.item(p.ns, kube::name_of(pod.metadata)));
  }
  return left;
}

void JobReconciler::delete_pods_after_store(Pass& p, bool all) {
  p.after_store.push_back([this, &p, all] { delete_pods(p, all); });
}

}  // namespace kubetune::op
