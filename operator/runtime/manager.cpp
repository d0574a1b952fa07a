#include "operator/runtime/manager.h"

#include <spdlog/spdlog.h>

#include "common/contracts.h"
#include "common/metrics/http_endpoint.h"
#include "operator/kube/objects.h"
#include "operator/policy/gang.h"
#include "operator/render/workload.h"

namespace kubetune::op {

using nlohmann::json;

Manager::Manager(kube::ClientConfig config, ManagerOptions options)
    : options_(std::move(options)),
      client_(std::make_unique<kube::KubeClient>(config)),
      metrics_(std::make_unique<OperatorMetrics>()),
      // A client of its own: events never wait behind the reconciles' requests, nor they behind
      // events.
      events_(std::make_unique<EventRecorder>(
          std::make_unique<kube::KubeClient>(EventRecorder::client_config(config)))) {
  for (kube::KubeClient* c : {client_.get(), &events_->client()}) {
    c->set_request_observer([m = metrics_.get()](const std::string& verb, int code, double) {
      m->requested(verb, code);
    });
  }
  if (options_.http_port >= 0) {
    http_ = std::make_unique<metrics::HttpEndpoint>(options_.http_address, options_.http_port);
    http_->add_registry(metrics_->registry());
    http_->add_handler("/healthz", [] { return std::make_pair(200, std::string("ok")); });
    http_->add_handler("/readyz", [this] {
      return ready() ? std::make_pair(200, std::string("ok"))
                     : std::make_pair(503, std::string("not ready: informers not synced or the "
                                                       "lease cannot be read"));
    });
  }
}

Manager::~Manager() { stop(); }

int Manager::http_port() const { return http_ ? http_->port() : -1; }

bool Manager::ready() const {
  // A standby replica is ready when it can read the lease (it can take over); a leader once its
  // caches are filled.
  if (!leading_) return !stopped_ && (!elector_ || elector_->lease_readable());
  return controllers_running_ && jobs_ && jobs_->has_synced() && pods_ && pods_->has_synced();
}

void Manager::start() {
  if (!options_.leader_elect) {
    leading_ = true;
    start_controllers();
    return;
  }
  elector_ = std::make_unique<LeaderElector>(*client_, options_.leader);
  election_thread_ = std::thread([this] {
    try {
      run_election();
    } catch (const std::exception& e) {  // e.g. 403 on the Lease: no retry can help
      std::lock_guard<std::mutex> lock(mutex_);
      fatal_error_ = e.what();
      done_.notify_all();
    }
  });
}

void Manager::run_election() {
  elector_->run(
      [this] {
        leading_ = true;
        metrics_->set_leader(true);
        start_controllers();
      },
      [this] {
        leading_ = false;
        metrics_->set_leader(false);
        stop_controllers();
        std::lock_guard<std::mutex> lock(mutex_);
        if (!stopped_) lost_leadership_ = true;
        done_.notify_all();
      });
}

void Manager::start_controllers() {
  kube::InformerOptions job_opts = options_.informer;
  job_opts.ns = options_.watch_namespace;
  jobs_ = std::make_unique<kube::Informer>(*client_, kube::resources::kFineTuneJobs, job_opts);
  kube::InformerOptions pod_opts = job_opts;
  pod_opts.label_selector = std::string(kLabelManagedBy) + "=" + kManagerName;
  pod_opts.index_label = kLabelJob;  // the reconciler lists a job's pods and Workloads by it
  kube::InformerOptions cached_pods = pod_opts;
  cached_pods.trim = keep_what_is_read;
  pods_ = std::make_unique<kube::Informer>(*client_, kube::resources::kPods, cached_pods);
  if (kueue_served()) {
    workloads_ = std::make_unique<kube::Informer>(*client_, kube::resources::kWorkloads, pod_opts);
  }
  queue_ = std::make_unique<WorkQueue>(options_.queue_base_delay, options_.queue_max_delay);
  reconciler_ = std::make_unique<JobReconciler>(*client_, *jobs_, *pods_, workloads_.get(),
                                                *events_, metrics_.get(), options_.reconciler);
  jobs_->add_handler([this](const std::string&, const json& obj) {
    queue_->add(kube::object_key(obj));
    metrics_->set_queue_depth(queue_->depth());
  });
  pods_->add_handler([this](const std::string&, const json& pod) { enqueue_owner(pod); });
  if (workloads_) {
    workloads_->add_handler([this](const std::string&, const json& wl) { enqueue_owner(wl); });
    workloads_->start();
  }
  jobs_->start();
  pods_->start();
  // Reconcile only from full caches: a half-filled pod cache would look like missing workers.
  while (!stopped_ &&
         !(jobs_->wait_for_sync(std::chrono::milliseconds(100)) &&
           pods_->wait_for_sync(std::chrono::milliseconds(100)) &&
           (!workloads_ || workloads_->wait_for_sync(std::chrono::milliseconds(100))))) {
  }
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  controllers_running_ = true;
}

void Manager::stop_controllers() {
  if (queue_) queue_->shutdown();
  for (auto& t : workers_) t.join();
  workers_.clear();
  if (jobs_) jobs_->stop();
  if (pods_) pods_->stop();
  if (workloads_) workloads_->stop();
  controllers_running_ = false;
}

bool Manager::kueue_served() {
  const std::string collection = kube::resources::kWorkloads.collection(options_.watch_namespace);
  try {
    client_->request("GET", collection + "?limit=1");
    spdlog::info("Kueue's Workloads are served: jobs labelled {} are queued through Kueue",
                 kueue::kLabelQueueName);
    return true;
  } catch (const kube::ApiError& e) {
    if (e.not_found()) {
      spdlog::info("no Kueue here ({} not served): jobs run without queueing", collection);
    } else {
      spdlog::warn("cannot list Kueue's Workloads ({}); jobs labelled {} will wait as Queued",
                   e.what(), kueue::kLabelQueueName);
    }
    return false;
  }
}

void Manager::enqueue_owner(const json& child) {
  const k8s::ObjectMeta meta = kube::metadata_of(child);
  for (const auto& ref : meta.owner_references) {
    if (ref.controller.value_or(false) && ref.kind == kKind) {
      queue_->add(meta.namespace_.value_or("") + "/" + ref.name);
      metrics_->set_queue_depth(queue_->depth());
    }
  }
}

void Manager::worker_loop() {
  std::string key;
  while (queue_->get(key)) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string result = "success";
    try {
      const ReconcileResult r = reconciler_->reconcile(key);
      queue_->forget(key);
      if (r.requeue_after.count() > 0) {
        result = "requeue";
        queue_->add_after(key, r.requeue_after);
      }
    } catch (const std::exception& e) {
      result = "error";
      spdlog::warn("reconcile {}: {}", key, e.what());
      queue_->add_rate_limited(key);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics_->reconciled(result, seconds);
    queue_->done(key);
    metrics_->set_queue_depth(queue_->depth());
  }
}

void Manager::stop(bool release_lease) {
  std::lock_guard<std::mutex> stopping(stop_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;  // an earlier call has finished the work
    stopped_ = true;
  }
  if (elector_) {
    elector_->stop(release_lease);
    if (election_thread_.joinable()) election_thread_.join();
  }
  stop_controllers();  // without election, or when the election thread ended by a fatal error
  leading_ = false;
  std::lock_guard<std::mutex> lock(mutex_);
  done_.notify_all();
}

Manager::Ended Manager::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [this] { return stopped_ || lost_leadership_ || !fatal_error_.empty(); });
  if (!fatal_error_.empty()) return Ended::kFatal;
  return lost_leadership_ ? Ended::kLostLeadership : Ended::kStopped;
}

std::string Manager::fatal_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return fatal_error_;
}

}  // namespace kubetune::op
