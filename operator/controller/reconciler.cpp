#include "operator/controller/reconciler.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "common/contracts.h"
#include "operator/api/desired_objects.h"
#include "operator/api/preflight_report.h"
#include "operator/api/sources.h"
#include "operator/controller/conditions.h"
#include "operator/controller/gang.h"
#include "operator/controller/gang_policy.h"
#include "operator/controller/progress.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/kube/objects.h"

namespace kubetune::op {

using nlohmann::json;
using std::chrono::milliseconds;

namespace {

const milliseconds kShortRequeue{300};  // waiting for pods of an old gang to go

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

// The gang a pod belongs to (kubetune.io/attempt).
int attempt_of(const k8s::Pod& pod) {
  try {
    return std::stoi(kube::label(pod.metadata, kLabelAttempt));
  } catch (const std::exception&) {  // no such label, or not a number
    return 0;
  }
}

bool is_terminal(const k8s::Pod& pod) {
  const std::string phase = pod.status.phase.value_or("");
  return phase == "Succeeded" || phase == "Failed";
}

// The spec hash a pod was made from; "" for pods of an operator from before the hash.
std::string spec_hash_of(const k8s::Pod& pod) {
  return kube::annotation(pod.metadata, kAnnotationSpecHash);
}

// The informer's copy of a pod, typed; nullopt when there is none.
std::optional<k8s::Pod> cached_pod(const kube::Informer& pods, const std::string& ns,
                                   const std::string& name) {
  const std::optional<json> pod = pods.get(ns, name);
  if (!pod) return std::nullopt;
  return pod->get<k8s::Pod>();
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

ReconcileResult JobReconciler::reconcile(const std::string& key) {
  Pass p;
  p.key = key;
  p.ns = key.substr(0, key.find('/'));
  p.name = key.substr(key.find('/') + 1);
  auto cached = jobs_.get(p.ns, p.name);
  if (!cached) {  // deleted: its objects go with it (ownerReferences); forget its series
    if (metrics_) metrics_->forget_job(p.ns, p.name);
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    scrapes_.erase(key);
    return {};
  }
  p.obj = *cached;
  p.metadata = kube::metadata_of(p.obj);
  if (kube::being_deleted(p.metadata)) return {};
  p.now = options_.clock();
  p.generation = p.metadata.generation.value_or(0);
  p.old_status = upgraded_job_status(p.obj);
  p.status = p.old_status;

  try {
    p.job = parse_job(p.obj);
  } catch (const SpecError& e) {
    return invalid_spec(p, e.problems());
  }
  const Condition* failed = find_condition(p.status.conditions, ConditionType::kFailed);
  if (p.phase() == Phase::kFailed && failed && failed->reason == to_string(Reason::kInvalidSpec) &&
      failed->observed_generation.value_or(0) < p.generation) {
    p.status = {};  // the spec was fixed: start over
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

  if (p.job.spec.run_policy.active_deadline_seconds) {
    const auto deadline = parse_time(*p.status.start_time) +
                          std::chrono::seconds(*p.job.spec.run_policy.active_deadline_seconds);
    if (p.now >= deadline) {
      return fail(p, Reason::kDeadlineExceeded,
                  "the job was active longer than runPolicy.activeDeadlineSeconds=" +
                      std::to_string(*p.job.spec.run_policy.active_deadline_seconds));
    }
    ReconcileResult r = run_gang(p);
    const auto left = until(p.now, deadline);
    if (r.requeue_after.count() == 0 || left < r.requeue_after) r.requeue_after = left;
    return r;
  }
  return run_gang(p);
}

ReconcileResult JobReconciler::run_gang(Pass& p) {
  if (auto r = wait_after_release(p)) return *r;
  const int64_t attempt = p.status.restarts.value_or(0);
  const std::string hash = spec_hash(p.job.spec_json);
  std::vector<k8s::Pod> current;
  int older = 0;
  for (const auto& pod : gang_pods(p)) {
    const int a = attempt_of(pod);
    if (a > attempt) {
      // Pods of a newer gang than our job says: our job object is stale. Come back later.
      return {kShortRequeue};
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
  if (older > 0) {  // the new gang starts when the old one is gone (pod names are reused)
    write_status(p);
    return {kShortRequeue};
  }
  if (current.empty() && p.job.spec.run_policy.preflight) {
    if (auto r = preflight(p, hash)) return *r;
  }
  if (auto r = admit(p)) return *r;

  GangState g = assess_gang(current, p.job.spec.workers.replicas);
  const bool created = p.status.workers.created.value_or(0) >= p.job.spec.workers.replicas;
  if (!g.failure && created) {
    for (int rank : g.missing) {
      if (!confirm_lost(p, rank)) return {kShortRequeue};  // our pod cache is behind
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
  if (g.all_succeeded()) return succeed(p);

  if (!g.missing.empty()) create_gang(p, g.missing);
  ReconcileResult result;
  if (auto r = observe_scheduling(p, g)) {
    if (p.status.scheduling.next_attempt_time) return *r;  // released
    result = *r;
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
      if (auto stall = stalled(p)) return handle_failure(p, *stall);
      if (result.requeue_after.count() == 0 || options_.progress_period < result.requeue_after) {
        result.requeue_after = options_.progress_period;
      }
    }
  }
  sync_pods_ready(p, g);
  write_status(p);
  return result;
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
    ensure_child(p, kube::resources::kServices, want.service);
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
    write_status(p);
    throw;
  }
}

std::optional<ReconcileResult> JobReconciler::preflight(Pass& p, const std::string& hash) {
  api::Preflight record = p.status.preflight;
  if (record.spec_hash != hash) {
    record = {};
    record.spec_hash = hash;
    record.failures = 0;
    p.status.sources.clear();  // fetched for another spec
    p.job.fetched_sources.clear();
  }
  if (record.verdict == api::PreflightVerdict::kOK) return std::nullopt;
  const int attempt = static_cast<int>(record.failures.value_or(0));
  const std::string name = preflight_pod_name(p.name);
  const std::optional<k8s::Pod> pod = cached_pod(pods_, p.ns, name);
  if (pod && owned_by(pod->metadata, p.uid())) {
    if (attempt_of(*pod) == attempt && spec_hash_of(*pod) == hash) {
      // Its next status change wakes us; while it fetches, its progress is read every few seconds.
      if (!is_terminal(*pod)) return fetch_progress(p, *pod, record);
      p.status.preflight = record;  // of this spec, even if the write after creating was lost
      return preflight_ended(p, *pod);
    }
    // One of an earlier spec or try: it goes before the new one (same name).
    if (!kube::being_deleted(pod->metadata)) {
      client_.remove(kube::resources::kPods.item(p.ns, name));
    }
    return ReconcileResult{kShortRequeue};
  }
  const auto [gib, source] = gpu_memory(p);
  const k8s::Pod pod_object = preflight_pod(p.job, gib, attempt);
  create_children(p, [&] {
    ensure_config_map(p, config_map(p.job));
    ensure_child(p, kube::resources::kPods, pod_object);
  });
  if (gib) {
    record.gpu_memory_gib = *gib;
    record.gpu_memory_source = source;
  }
  p.status.preflight = record;
  const std::string message =
      "pod " + name +
      " (no GPU) reads the model's config and the whole dataset and estimates the GPU memory" +
      (gib ? " against " + source : std::string(" (no GPU memory known to check against)"));
  if (!find_condition(p.status.conditions, ConditionType::kPreflightPassed)) {
    p.events.push_back({"Normal", Reason::kPreflightStarted, message});
  }
  set_condition(p.status.conditions, ConditionType::kPreflightPassed, false, Reason::kChecking,
                message, p.generation, p.now);
  write_status(p);
  return ReconcileResult{};
}

// The preflight pod's fetch container (hf:// and s3:// sources) runs before the trainer's: its
// report pins the revisions every worker then reads; a source that cannot be fetched for a reason
// retrying cannot cure (exit 2: not found, unauthorised) fails the job, naming it. Another exit
// leaves the pod without a verdict, which is tried again like any other.
std::optional<ReconcileResult> JobReconciler::sources_fetched(Pass& p, const k8s::Pod& pod) {
  for (const auto& c : pod.status.init_container_statuses) {
    if (c.name != kFetchContainer || !c.state.terminated) continue;
    const k8s::ContainerStateTerminated& t = *c.state.terminated;
    if (t.exit_code == 0) {
      const auto fetched = parse_fetch_results(t.message.value_or(""));
      if (fetched.size() != remote_sources(p.job.spec).size()) {
        // Unpinned workers could read other revisions than the preflight checked: try again.
        return retry_preflight(p,
                               "the fetch container's report (its termination message) is "
                               "not one result per source");
      }
      p.status.sources = fetched;
      p.job.fetched_sources = p.status.sources;
      std::string summary;
      for (const auto& s : p.status.sources) {
        summary += (summary.empty() ? "" : ", ") + s.source.value_or("") + " at " +
                   s.revision.value_or("").substr(0, 12) +
                   (s.cached.value_or(false) ? " (in the cache)" : " (downloaded)");
      }
      p.events.push_back({"Normal", Reason::kSourcesFetched, summary});
    } else if (t.exit_code == kExitUserError) {
      std::string why = t.message.value_or("");
      while (!why.empty() && why.back() == '\n') why.pop_back();
      why = why.substr(why.rfind('\n') == std::string::npos ? 0 : why.rfind('\n') + 1);
      const std::string message = "the job's sources cannot be fetched: " + why +
                                  " (kubectl logs pod/" + preflight_pod_name(p.name) + " -c fetch)";
      set_condition(p.status.conditions, ConditionType::kPreflightPassed, false,
                    Reason::kSourceUnavailable, message, p.generation, p.now);
      return fail(p, Reason::kSourceUnavailable, message);
    }
  }
  return std::nullopt;
}

std::string JobReconciler::fetch_failure(const k8s::Pod& pod) {
  for (const auto& c : pod.status.init_container_statuses) {
    if (c.name != kFetchContainer || !c.state.terminated || c.state.terminated->exit_code == 0)
      continue;
    std::string why = c.state.terminated->message.value_or("");
    if (why.size() > 512) why = "..." + why.substr(why.size() - 509);
    return "its fetch container exited " + std::to_string(c.state.terminated->exit_code) +
           (why.empty() ? "" : ": " + why);
  }
  return "";
}

ReconcileResult JobReconciler::fetch_progress(Pass& p, const k8s::Pod& pod, api::Preflight record) {
  constexpr std::chrono::seconds kFetchPoll{5};
  bool fetching = false;
  for (const auto& c : pod.status.init_container_statuses) {
    fetching = fetching || (c.name == kFetchContainer && c.state.running);
  }
  const std::string ip = pod.status.pod_ip.value_or("");
  if (!fetching || ip.empty()) return ReconcileResult{};
  {
    // Our own status write wakes us at once: read the endpoint at most every kFetchPoll.
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    auto& last = scrapes_[p.key].fetch;
    if (p.now - last < kFetchPoll) return {until(p.now, last + kFetchPoll)};
    last = p.now;
  }
  const std::string host = ip.find(':') == std::string::npos ? ip : "[" + ip + "]";  // IPv6
  try {
    record.fetch = scrape_fetch_progress(
        "http://" + host + ":" + std::to_string(kFetchMetricsPort) + "/metrics",
        options_.scrape_timeout_ms);
  } catch (const std::exception& e) {
    spdlog::debug("{}: fetch progress not readable yet: {}", p.key, e.what());
    return ReconcileResult{kFetchPoll};
  }
  p.status.preflight = record;
  if (record.fetch.summary) {
    set_condition(p.status.conditions, ConditionType::kPreflightPassed, false, Reason::kChecking,
                  "pod " + preflight_pod_name(p.name) +
                      " fetches the job's sources: " + *record.fetch.summary,
                  p.generation, p.now);
  }
  write_status(p);
  return ReconcileResult{kFetchPoll};
}

std::optional<ReconcileResult> JobReconciler::preflight_ended(Pass& p, const k8s::Pod& pod) {
  if (auto failed = sources_fetched(p, pod)) return failed;
  std::optional<k8s::ContainerStateTerminated> terminated;
  for (const auto& c : pod.status.container_statuses) {
    if (c.name == kTrainerContainer) terminated = c.state.terminated;
  }
  const int code = terminated ? terminated->exit_code : -1;
  const std::string text = terminated ? terminated->message.value_or("") : "";
  std::optional<api::PreflightReport> report = parse_preflight_report(text);
  api::Preflight& record = p.status.preflight;
  const std::string name = preflight_pod_name(p.name);

  const bool passed = pod.status.phase.value_or("") == "Succeeded";
  if (passed || code == kExitUserError) {
    // Anything in the pod can write its termination message: a verdict that is none of the
    // schema's, or none at all, means the input could not be read.
    api::PreflightVerdict verdict = api::PreflightVerdict::kInputInvalid;
    if (!passed && report && report->verdict && *report->verdict != api::PreflightVerdict::kOK) {
      verdict = *report->verdict;
    } else {
      verdict = passed ? api::PreflightVerdict::kOK : api::PreflightVerdict::kInputInvalid;
    }
    if (report) report->verdict = verdict;
    const std::string summary = report ? preflight_summary(*report) : text;
    record.verdict = verdict;
    record.summary = summary.substr(0, 4096);
    record.completion_time = format_time(p.now);
    if (report) record.report = *report;
    if (passed) {
      set_condition(p.status.conditions, ConditionType::kPreflightPassed, true, Reason::kPassed,
                    summary, p.generation, p.now);
      p.events.push_back({"Normal", Reason::kPreflightPassed, summary});
      return std::nullopt;
    }
    const std::string message = (report && report->message ? *report->message : summary) +
                                " (found by the preflight; kubectl logs pod/" + name +
                                " has the whole report)";
    set_condition(p.status.conditions, ConditionType::kPreflightPassed, false, reason_for(verdict),
                  message, p.generation, p.now);
    return fail(p, reason_for(verdict), message);
  }

  // Ended without a verdict: evicted, out of memory, killed. Tried again, like a gang.
  std::string why = pod.status.reason.value_or(terminated ? terminated->reason.value_or("") : "");
  if (why.empty() && !terminated) why = fetch_failure(pod);
  return retry_preflight(p, "preflight pod " + name + " ended without a verdict (" +
                                (why.empty() ? "exit code " + std::to_string(code) : why) + ")");
}

ReconcileResult JobReconciler::retry_preflight(Pass& p, const std::string& message) {
  api::Preflight& record = p.status.preflight;
  const std::string name = preflight_pod_name(p.name);
  const int64_t failures = record.failures.value_or(0) + 1;
  if (failures > p.job.spec.run_policy.backoff_limit) {
    return fail(p, Reason::kPreflightFailed,
                message + "; tried " + std::to_string(failures) + " time(s) (backoffLimit " +
                    std::to_string(p.job.spec.run_policy.backoff_limit) +
                    "); runPolicy.preflight: false skips the check");
  }
  record.failures = failures;
  p.events.push_back({"Warning", Reason::kPreflightRetry, message + "; trying again"});
  write_status(p);  // first: a stale pass fails here and counts nothing
  client_.remove(kube::resources::kPods.item(p.ns, name));
  return ReconcileResult{kShortRequeue};
}

std::pair<std::optional<double>, std::string> JobReconciler::gpu_memory(const Pass& p) {
  if (p.job.spec.workers.gpu_memory_gib)
    return {p.job.spec.workers.gpu_memory_gib, "workers.gpuMemoryGiB"};
  if (p.job.spec.workers.gpus_per_worker == 0) return {std::nullopt, ""};
  // GPU feature discovery labels each GPU node with its GPUs' memory; the workers may land on
  // any node their nodeSelector allows, so the smallest counts.
  std::string selector = kNodeLabelGpuMemory;
  for (const auto& [key, value] : p.job.spec.workers.node_selector) {
    selector += "," + key + "=" + value;
  }
  k8s::NodeList nodes;
  try {
    nodes = client_.list(kube::resources::kNodes.collection(""), selector).get<k8s::NodeList>();
  } catch (const kube::ApiError& e) {
    spdlog::warn("{}: cannot list nodes for their GPU memory ({}); the preflight checks no limit",
                 p.key, e.what());
    return {std::nullopt, ""};
  }
  double smallest = 0;
  int counted = 0;
  for (const auto& node : nodes.items) {
    try {
      const double mib = std::stod(kube::label(node.metadata, kNodeLabelGpuMemory));
      if (mib > 0 && (counted == 0 || mib < smallest)) smallest = mib;
      counted += mib > 0;
    } catch (const std::exception&) {  // not a number: not GFD's label
    }
  }
  if (counted == 0) return {std::nullopt, ""};
  return {smallest / 1024.0,
          std::string(kNodeLabelGpuMemory) + " of " + std::to_string(counted) + " node(s)"};
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

ReconcileResult JobReconciler::handle_failure(Pass& p, const WorkerFailure& f) {
  const int64_t restarts = p.status.restarts.value_or(0);
  const GangDecision decision = next(f, restarts, p.job.spec.run_policy.backoff_limit);
  if (!decision.restart) return fail(p, decision.reason, decision.message);
  p.status.restarts = restarts + 1;
  p.status.workers.created = 0;
  const std::string& message = decision.message;
  transition(p, Phase::kRestarting, ConditionType::kRestarting, f.reason, message, true);
  set_condition(p.status.conditions, ConditionType::kRunning, false, f.reason, f.message,
                p.generation, p.now);
  // The status goes first: if this pass is based on a stale job, the write fails with 409 and
  // nothing is deleted, so the failure is counted once.
  write_status(p);
  if (metrics_) metrics_->restarted(p.ns, p.name);
  delete_pods(p, true);
  return {kShortRequeue};
}

ReconcileResult JobReconciler::fail(Pass& p, Reason reason, const std::string& message) {
  p.status.completion_time = format_time(p.now);
  transition(p, Phase::kFailed, ConditionType::kFailed, reason, message, true);
  set_condition(p.status.conditions, ConditionType::kRunning, false, reason, message, p.generation,
                p.now);
  write_status(p);
  delete_pods(p, false);  // frees the GPUs; finished pods stay for their logs
  return {ttl_requeue(p)};
}

ReconcileResult JobReconciler::succeed(Pass& p) {
  p.status.completion_time = format_time(p.now);
  const std::string message =
      "all " + std::to_string(p.job.spec.workers.replicas) + " workers completed successfully";
  transition(p, Phase::kSucceeded, ConditionType::kSucceeded, Reason::kCompleted, message, false);
  set_condition(p.status.conditions, ConditionType::kRunning, false, Reason::kCompleted, message,
                p.generation, p.now);
  write_status(p);
  return {ttl_requeue(p)};
}

ReconcileResult JobReconciler::invalid_spec(Pass& p, const std::vector<std::string>& problems) {
  const std::string message = "invalid spec: " + join(problems, "; ");
  const Condition* failed = find_condition(p.status.conditions, ConditionType::kFailed);
  if (p.phase() == Phase::kFailed && failed && failed->reason == to_string(Reason::kInvalidSpec) &&
      failed->message == message) {
    return {};
  }
  if (!p.status.completion_time) p.status.completion_time = format_time(p.now);
  transition(p, Phase::kFailed, ConditionType::kFailed, Reason::kInvalidSpec, message, true);
  if (p.old_status.phase == Phase::kFailed) {
    p.events.push_back({"Warning", Reason::kInvalidSpec, message});  // same phase, new problems
  }
  write_status(p);
  delete_pods(p, false);
  return {};
}

ReconcileResult JobReconciler::finished(Pass& p) {
  delete_pods(p, false);  // level-triggered clean-up after Failed
  write_status(p);        // only writes when something (e.g. the spec reset) changed
  sync_workload(p);       // Kueue: Finished, which gives the quota back
  return {ttl_requeue(p)};
}

std::chrono::milliseconds JobReconciler::ttl_requeue(Pass& p) {
  const auto& ttl = p.job.spec.run_policy.ttl_seconds_after_finished;
  if (!ttl || !p.status.completion_time) return milliseconds(0);
  const auto expiry = parse_time(*p.status.completion_time) + std::chrono::seconds(*ttl);
  if (p.now < expiry) return until(p.now, expiry);
  spdlog::info("deleting {}: ttlSecondsAfterFinished={} expired", p.key, *ttl);
  client_.remove(p.item(), "Background");  // the garbage collector takes its pods
  return milliseconds(0);
}

ReconcileResult JobReconciler::suspend(Pass& p) {
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
  write_status(p);
  sync_workload(p);  // Kueue: spec.active=false, then the quota back once the pods are gone
  return left > 0 ? ReconcileResult{kShortRequeue} : ReconcileResult{};
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

}  // namespace kubetune::op
