// The preflight pod (runPolicy.preflight), as the reconciler drives it for each spec (hash):
// created while the job is Pending, before the first gang; while its fetch container runs (hf://
// and s3:// sources) the fetch's progress goes into status.preflight.fetch; when it ends, its
// verdict passes the job on to the gang or fails it, and a pod that ended without one (evicted,
// OOMKilled) is counted and tried again up to runPolicy.backoffLimit.
#include <spdlog/spdlog.h>

#include "operator/api/preflight_report.h"
#include "operator/controller/reconcile_pass.h"
#include "operator/policy/fetch_end.h"
#include "operator/policy/preflight_summary.h"
#include "operator/policy/progress.h"
#include "operator/render/desired_objects.h"
#include "operator/render/sources.h"

namespace kubetune::op {

using nlohmann::json;

namespace {

// The informer's copy of a pod, typed; nullopt when there is none.
std::optional<k8s::Pod> cached_pod(const kube::Informer& pods, const std::string& ns,
                                   const std::string& name) {
  const std::optional<json> pod = pods.get(ns, name);
  if (!pod) return std::nullopt;
  return pod->get<k8s::Pod>();
}

// Why the pod's fetch container failed, for the retry's message ("" when it did not).
std::string fetch_failure(const FetchEnd& fetch) {
  if (!fetch.failed()) return "";
  return "its fetch container exited " + std::to_string(*fetch.exit_code) +
         (fetch.error.empty() ? "" : ": " + fetch.error);
}

}  // namespace

std::optional<PassDecision> JobReconciler::preflight(Pass& p, const std::string& hash) {
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
      if (!is_terminal(*pod)) {
        const FetchEnd fetch = read_fetch_end(*pod);
        if (!fetch.cannot_start.empty()) {
          return fail(p, Reason::kSourceUnavailable,
                      fetch_cannot_start_message("the preflight pod " + name, fetch));
        }
        return fetch_progress(p, *pod, record);
      }
      p.status.preflight = record;  // of this spec, even if the write after creating was lost
      return preflight_ended(p, *pod);
    }
    // One of an earlier spec or try: it goes before the new one (same name).
    if (!kube::being_deleted(pod->metadata)) {
      client_.remove(kube::resources::kPods.item(p.ns, name));
    }
    return PassDecision{{kShortRequeue}, false};
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
  return PassDecision{};
}

// The preflight pod's fetch container (hf:// and s3:// sources) runs before the trainer's: its
// report pins the revisions every worker then reads; a source that cannot be fetched for a reason
// retrying cannot cure (classify_fetch_exit: not found, unauthorised) fails the job, naming it.
// Another exit leaves the pod without a verdict, which is tried again like any other.
std::optional<PassDecision> JobReconciler::sources_fetched(Pass& p, const k8s::Pod& pod) {
  const FetchEnd fetch = read_fetch_end(pod);
  if (!fetch.exit_code) return std::nullopt;
  if (*fetch.exit_code == 0) {
    const auto fetched = parse_fetch_results(fetch.results);
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
    return std::nullopt;
  }
  const FetchExit exit = classify_fetch_exit(*fetch.exit_code, fetch.reason);
  if (!exit.permanent) return std::nullopt;
  const std::string message = "the job's sources cannot be fetched: " + fetch.error +
                              " (kubectl logs pod/" + preflight_pod_name(p.name) + " -c fetch)";
  set_condition(p.status.conditions, ConditionType::kPreflightPassed, false, exit.reason, message,
                p.generation, p.now);
  return fail(p, exit.reason, message);
}

PassDecision JobReconciler::fetch_progress(Pass& p, const k8s::Pod& pod, api::Preflight record) {
  constexpr std::chrono::seconds kFetchPoll{5};
  const std::string ip = pod.status.pod_ip.value_or("");
  if (!read_fetch_end(pod).running || ip.empty()) return PassDecision{{}, false};
  {
    // Our own status write wakes us at once: read the endpoint at most every kFetchPoll.
    std::lock_guard<std::mutex> lock(scrape_mutex_);
    auto& last = scrapes_[p.key].fetch;
    if (p.now - last < kFetchPoll) return PassDecision{{until(p.now, last + kFetchPoll)}, false};
    last = p.now;
  }
  const std::string host = ip.find(':') == std::string::npos ? ip : "[" + ip + "]";  // IPv6
  try {
    record.fetch = scrape_fetch_progress(
        "http://" + host + ":" + std::to_string(kFetchMetricsPort) + "/metrics",
        options_.scrape_timeout_ms);
  } catch (const std::exception& e) {
    spdlog::debug("{}: fetch progress not readable yet: {}", p.key, e.what());
    return PassDecision{{kFetchPoll}, false};
  }
  p.status.preflight = record;
  if (record.fetch.summary) {
    set_condition(p.status.conditions, ConditionType::kPreflightPassed, false, Reason::kChecking,
                  "pod " + preflight_pod_name(p.name) +
                      " fetches the job's sources: " + *record.fetch.summary,
                  p.generation, p.now);
  }
  return PassDecision{{kFetchPoll}};
}

std::optional<PassDecision> JobReconciler::preflight_ended(Pass& p, const k8s::Pod& pod) {
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
  if (why.empty() && !terminated) why = fetch_failure(read_fetch_end(pod));
  return retry_preflight(p, "preflight pod " + name + " ended without a verdict (" +
                                (why.empty() ? "exit code " + std::to_string(code) : why) + ")");
}

PassDecision JobReconciler::retry_preflight(Pass& p, const std::string& message) {
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
  // Once stored: a stale pass fails there and counts nothing.
  p.after_store.push_back(
      [this, &p, name] { client_.remove(kube::resources::kPods.item(p.ns, name)); });
  return PassDecision{{kShortRequeue}};
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

}  // namespace kubetune::op
