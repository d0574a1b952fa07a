// The FineTuneJob reconciler: level-triggered and idempotent. Each call reads the job and its
// pods from the informer caches, decides what should exist (ConfigMap, headless Service, one pod
// per rank of the current gang) and what the status is, makes it so, and stores the status
// through the status subresource, once, at the end of the pass (reconcile()). Running it twice in
// a row, or after an operator restart, does nothing the first run did not (pods have fixed names;
// creating one twice answers 409).
//
// Gang restart bookkeeping lives in status: status.restarts is the current gang's number and
// labels its pods (kubetune.io/attempt); status.workers.created says the gang was created, so a
// pod that then disappears is a lost worker, not one still to create. Anything destructive that a
// decision implies (deleting the gang after a failure, the preflight pod to try it again) waits
// until the new status is stored with the resourceVersion that was read: a stale cache gets 409
// and the pass is abandoned and retried, so one failure is never counted twice.
//
// The files: reconciler.cpp (the pass, the gang, the job's ends), preflight_pod.cpp (the preflight
// pod and its fetch), progress_watch.cpp (rank 0's progress and the stall watchdog),
// scheduling.cpp (gang placement), queueing.cpp (Kueue).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "operator/api/job.h"
#include "operator/controller/events.h"
#include "operator/controller/operator_metrics.h"
#include "operator/kube/client.h"
#include "operator/kube/informer.h"
#include "operator/kube/kube_types.h"
#include "operator/policy/conditions.h"
#include "operator/policy/gang.h"
#include "operator/policy/phase.h"
#include "operator/policy/time_util.h"
#include "operator/render/workload.h"

namespace kubetune::op {

struct ReconcileResult {
  std::chrono::milliseconds requeue_after{0};  // 0 = wait for the next event
};

// What one pass decided: when to come back, and whether the status it computed is stored. Every
// decision stores it but those that only wait (a cache behind, pods of an old gang still going).
struct PassDecision {
  ReconcileResult result;
  bool store = true;
};

struct ReconcilerOptions {
  std::chrono::milliseconds progress_period{15000};  // how often rank 0's metrics are read
  int scrape_timeout_ms = 2000;
  std::function<SystemTime()> clock = [] { return std::chrono::system_clock::now(); };
};

class JobReconciler {
 public:
  // `workloads`: Kueue's Workloads that the operator made, or null where the cluster serves none.
  JobReconciler(kube::KubeClient& client, kube::Informer& jobs, kube::Informer& pods,
                kube::Informer* workloads, EventRecorder& events, OperatorMetrics* metrics,
                ReconcilerOptions options);

  // key: "namespace/name". Throws on API errors; the caller re-queues with back-off.
  ReconcileResult reconcile(const std::string& key);

 private:
  struct Pass;  // the state of one reconcile call

  // The job and its status from the cache; false when it is gone or being deleted.
  bool read(Pass& p, const std::string& key);
  // Everything a pass decides, in order: the spec, the job's end, suspension, the deadline, the
  // gang.
  PassDecision decide(Pass& p);
  PassDecision invalid_spec(Pass& p, const std::vector<std::string>& problems);
  PassDecision finished(Pass& p);
  PassDecision suspend(Pass& p);
  void resume(Pass& p);
  PassDecision run_gang(Pass& p);

  // The preflight pod of the current spec (runPolicy.preflight, preflight_pod.cpp): nullopt once
  // it passed, so that the gang may be created; else what was decided (waiting for it, or the job
  // failed).
  std::optional<PassDecision> preflight(Pass& p, const std::string& hash);
  std::optional<PassDecision> preflight_ended(Pass& p, const k8s::Pod& pod);
  // hf:// and s3:// sources: what the preflight pod's fetch container reported (fetch_end.h), and
  // how far it is while it runs (status.preflight.fetch).
  std::optional<PassDecision> sources_fetched(Pass& p, const k8s::Pod& pod);
  PassDecision fetch_progress(Pass& p, const k8s::Pod& pod, api::Preflight record);
  // A preflight pod that ended without a verdict: counted and tried again, or the job fails.
  PassDecision retry_preflight(Pass& p, const std::string& message);
  // One GPU's memory for the preflight's fit check, and where it came from: workers.gpuMemoryGiB,
  // else the smallest nvidia.com/gpu.memory label of the nodes the workers may be placed on.
  std::pair<std::optional<double>, std::string> gpu_memory(const Pass& p);

  // Gang scheduling (scheduling.cpp). After a release: nullopt once the back-off is over and the
  // released pods are gone, else what was decided.
  std::optional<PassDecision> wait_after_release(Pass& p);
  // Records where the scheduler put the gang (Scheduled condition, status.scheduling, events);
  // a requeue for the scheduling timeout, or the decision to release the gang when it expired
  // (status.scheduling.nextAttemptTime is then set).
  std::optional<PassDecision> observe_scheduling(Pass& p, const GangState& g);
  PassDecision release_gang(Pass& p, const std::string& waiting, int held);

  // Kueue (queueing.cpp), for a job labelled kueue.x-k8s.io/queue-name: nullopt once its
  // Workload is admitted (Pass::flavors then holds the admitted ResourceFlavors), else what was
  // decided (queued, or stopping an evicted gang).
  std::optional<PassDecision> admit(Pass& p);
  // The Workload of the current spec that the job owns (others it owns are deleted), if any.
  std::optional<k8s::Workload> current_workload(Pass& p);
  PassDecision create_workload(Pass& p, const std::string& queue);
  PassDecision stop_evicted(Pass& p, const k8s::Workload& workload,
                            const kueue::Admission& admission);
  // The Workload deactivated by someone else (spec.active=false, not this job's suspend): the gang
  // stopped as by an eviction, the job Queued with Admitted=False reason Deactivated, until the
  // Workload is reactivated or runPolicy.suspend toggled.
  PassDecision deactivated(Pass& p, const k8s::Workload& workload,
                           const kueue::Admission& admission);
  // Writes runPolicy.suspend onto the Workload's spec.active when the user changed it since it
  // was last applied (kueue::kAnnotationAppliedSuspend); true when it wrote.
  bool apply_suspend(Pass& p, const k8s::Workload& workload);
  // Stops the gang's `left` workers (SIGTERM: a checkpoint); with none left, gives back the quota
  // of the evicted Workload. `store`: whether this pass's status is written.
  PassDecision stop_then_release(Pass& p, const k8s::Workload& workload,
                                 const kueue::Admission& admission, int left, bool store);
  // After an eviction, once the gang is gone: the Workload's quota reservation given back.
  void release_quota(Pass& p, const k8s::Workload& workload, const kueue::Admission& admission);
  PassDecision queue_unavailable(Pass& p, const std::string& message);
  void mark_queued(Pass& p, Reason reason, const std::string& message);
  // Keeps the Workload in step with a suspended or finished job (spec.active, Finished).
  void sync_workload(Pass& p);
  // The admitted Workload's PodsReady condition, as Kueue's jobframework writes it (what Kueue's
  // waitForPodsReady acts on): True once every worker runs.
  void sync_pods_ready(Pass& p, const GangState& g);

  PassDecision handle_failure(Pass& p, const WorkerFailure& f);
  PassDecision fail(Pass& p, Reason reason, const std::string& message);
  PassDecision succeed(Pass& p, const GangState& g);
  void create_gang(Pass& p, const std::vector<int>& missing);
  // Runs `create` (ensure_child calls). A child the server refuses is shown in the Created
  // condition and an event, and rethrown: reconcile() stores that status and the queue retries
  // with back-off, as the PriorityClass or the quota may appear later.
  void create_children(Pass& p, const std::function<void()>& create);
  // Creates a child (an object of any kind, as the REST client takes it) unless the job already
  // owns it; throws ChildNotCreated when the server refuses or the name is taken. Returns the
  // object that was there already (owned by the job, adopted if it was an orphan), or nullopt when
  // it was created.
  std::optional<nlohmann::json> ensure_child(Pass& p, const kube::Resource& kind,
                                             const nlohmann::json& object);
  // ensure_child for the job's ConfigMap: one that differs is updated (the spec was edited while
  // the job was suspended).
  void ensure_config_map(Pass& p, const k8s::ConfigMap& config_map);
  bool confirm_lost(Pass& p, int rank);

  // Rank 0's progress and the stall watchdog (progress_watch.cpp).
  void update_progress(Pass& p, const k8s::Pod& pod0);
  // A Stalled failure when rank 0's step has not advanced for runPolicy.stallTimeoutSeconds.
  std::optional<WorkerFailure> stalled(const Pass& p);

  void transition(Pass& p, Phase phase, ConditionType condition, Reason reason,
                  const std::string& message, bool warning);
  // The one writer of the job's status (and, once it is stored, of the events describing it).
  void write_status(Pass& p);
  // Deletes the job's pods that are still running (all = also finished ones); returns how many
  // are left (deleting or not).
  int delete_pods(Pass& p, bool all);
  // delete_pods, once the status is stored (Pass::after_store).
  void delete_pods_after_store(Pass& p, bool all);
  void forget_scrapes(const std::string& key);
  std::vector<k8s::Pod> job_pods(const Pass& p) const;   // all pods the job owns
  std::vector<k8s::Pod> gang_pods(const Pass& p) const;  // its workers
  // When a finished job's runPolicy.ttlSecondsAfterFinished expires; once it has, the job is
  // deleted after the status is stored.
  std::chrono::milliseconds ttl_requeue(Pass& p);

  kube::KubeClient& client_;
  kube::Informer& jobs_;
  kube::Informer& pods_;
  kube::Informer* workloads_;
  EventRecorder& events_;
  OperatorMetrics* metrics_;
  ReconcilerOptions options_;
  std::mutex scrape_mutex_;
  // Per job: when rank 0 was last scraped (at most once a progress period), and when it last
  // answered. The stall watchdog acts only on a gang whose metrics it has reached, so that
  // metrics the operator cannot reach (a NetworkPolicy) never restart a healthy job.
  struct Scrapes {
    std::chrono::steady_clock::time_point last;
    SystemTime answered;
    std::optional<int64_t> recoveries;  // rank 0's kubetune_out_of_memory_recoveries_total
    std::string recoveries_gang;        // ... of this rank 0 pod (uid): each gang counts anew
    SystemTime fetch;                   // the preflight's fetch progress, last read
  };
  // The recoveries counter rank 0 (pod uid `gang`) showed at the previous scrape, remembering
  // `now`: 0 for a new gang, `now` when the operator has not seen this job since it started and
  // the status already counts some (they were counted before it restarted).
  int64_t scraped_recoveries(const std::string& key, const std::string& gang, int64_t now,
                             bool status_counts_some);
  std::map<std::string, Scrapes> scrapes_;
};

// A child the job needs could not be created; `reason` becomes the Created condition's reason.
class ChildNotCreated : public std::runtime_error {
 public:
  ChildNotCreated(Reason reason, const std::string& message, bool warning)
      : std::runtime_error(message), reason(reason), warning(warning) {}
  Reason reason;
  bool warning;
};

// Thrown when a status write finds the object changed by someone else: retry from fresh state.
class StaleObjectError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kubetune::op
