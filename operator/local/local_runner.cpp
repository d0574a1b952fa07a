#include "operator/local/local_runner.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/contracts.h"
#include "common/launch_contract.h"
#include "common/metrics/free_port.h"
#include "operator/kube/objects.h"
#include "operator/local/fetched_sources.h"
#include "operator/local/preflight.h"
#include "operator/local/process_gang.h"
#include "operator/local/published_output.h"
#include "operator/policy/fetch_end.h"
#include "operator/policy/gang.h"
#include "operator/policy/gang_policy.h"
#include "operator/policy/preflight_summary.h"
#include "operator/policy/progress.h"
#include "operator/policy/time_util.h"
#include "operator/render/desired_objects.h"
#include "operator/render/publish.h"

extern char** environ;

namespace kubetune::op::local {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int count_local_gpus() {
  int n = 0;
  static const std::regex dev("nvidia[0-9]+");
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec)) {
    if (std::regex_match(e.path().filename().string(), dev)) ++n;
  }
  return n;
}

// How the pods map onto this machine.
struct Placement {
  int gpus_per_worker = 0;  // 0: CPU, one process per worker
  int master_port = 0;
};

Placement place(const FineTuneJob& job, const LocalRunOptions& o) {
  Placement p;
  const int gpus = o.local_gpus >= 0 ? o.local_gpus : count_local_gpus();
  if (job.spec.workers.gpus_per_worker > 0 && gpus > 0) {
    p.gpus_per_worker =
        std::max(1, std::min(job.spec.workers.gpus_per_worker, gpus / job.spec.workers.replicas));
  }
  p.master_port = metrics::pick_free_port("127.0.0.1");
  return p;
}

// Each worker gets its own config file: on one machine the workers' rank-0 metrics ports would
// collide, so worker r's port is shifted by the processes before it.
std::string write_config(const FineTuneJob& job, const std::string& dir, int rank, int nproc) {
  json config = job.train_config;
  // The trainer's config stays JSON, written as validated: only its metrics.port changes.
  if (const int port = job.spec.metrics.port; port > 0) {
    config.at("metrics").at("port") = port + rank * nproc;  // json: the trainer's config file
  }
  const std::string path = dir + "/config-" + std::to_string(rank) + ".json";
  std::ofstream(path) << config.dump(2) << "\n";
  return path;
}

std::vector<std::string> base_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  return env;
}

void set_env(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  for (auto& e : env) {
    if (e.rfind(name + "=", 0) == 0) {
      e = name + "=" + value;
      return;
    }
  }
  env.push_back(name + "=" + value);
}

// The pod's container, turned into a process: same arguments and environment, local addresses.
ProcessSpec to_process(const k8s::Pod& pod, const FineTuneJob& job, const LocalRunOptions& o,
                       const Placement& place, int rank, const std::string& config_path) {
  const k8s::Container& c = pod.spec.containers.at(0);
  const int nproc = place.gpus_per_worker > 0 ? place.gpus_per_worker : 1;
  ProcessSpec spec;
  std::vector<std::string> cmd = c.command;
  cmd[0] = o.trainer;
  for (size_t i = 0; i + 1 < cmd.size(); ++i) {
    if (cmd[i] == "--config") cmd[i + 1] = config_path;
  }
  spec.argv = cmd;
  spec.env = base_environment();
  // Values only: the pod's fields (valueFrom) are set below, as the kubelet would.
  for (const auto& e : c.env) {
    if (e.value) set_env(spec.env, e.name, *e.value);
  }
  set_env(spec.env, "POD_NAME", kube::name_of(pod.metadata));
  set_env(spec.env, "POD_NAMESPACE", job.ns);
  // The pod's launch contract, on this machine: rank 0 at 127.0.0.1, a free port, the GPUs here.
  LaunchContract node;
  node.nnodes = job.spec.workers.replicas;
  node.node_rank = rank;
  node.nproc_per_node = nproc;
  node.master_port = place.master_port;
  for (const auto& [name, value] : node.to_environment()) set_env(spec.env, name, value);
  if (place.gpus_per_worker > 0) {
    std::string devices;
    for (int g = 0; g < place.gpus_per_worker; ++g) {
      devices += (g ? "," : "") + std::to_string(rank * place.gpus_per_worker + g);
    }
    set_env(spec.env, "CUDA_VISIBLE_DEVICES", devices);
  } else {
    set_env(spec.env, "CUDA_VISIBLE_DEVICES", "");  // CPU workers, as the pod would be
  }
  spec.prefix = "[worker-" + std::to_string(rank) + "] ";
  return spec;
}

// Rank 0's progress, or nothing when it is not serving yet (loading) or between steps.
std::optional<Progress> read_progress(const FineTuneJob& job) {
  if (job.spec.metrics.port <= 0) return std::nullopt;
  try {
    const Progress p = scrape_progress(
        "http://127.0.0.1:" + std::to_string(job.spec.metrics.port) + "/metrics", 1000);
    if (p.step) return p;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

void print_progress(const Progress& p, std::ostream& out) {
  out << "[kubetune] progress: step " << static_cast<long>(*p.step) << "/"
      << static_cast<long>(p.total_steps.value_or(0));
  if (p.loss) out << "  loss " << *p.loss;
  if (p.tokens_per_second) out << "  tokens/s (rank 0) " << *p.tokens_per_second;
  if (p.eta_seconds) out << "  eta " << format_duration(*p.eta_seconds);
  out << "\n" << std::flush;
}

// The operator's stall watchdog on this machine: the clock starts with the gang and restarts
// whenever rank 0's step advances.
class StallWatch {
 public:
  explicit StallWatch(long timeout_seconds)
      : timeout_(timeout_seconds), since_(std::chrono::steady_clock::now()) {}
  void saw(const std::optional<Progress>& p) {
    if (!p) return;
    answered_ = true;
    if (*p->step == step_) return;
    step_ = *p->step;
    since_ = std::chrono::steady_clock::now();
  }
  // Only once rank 0 has answered: a port we cannot read is no evidence of a stall.
  bool stalled() const {
    return timeout_ > 0 && answered_ &&
           std::chrono::steady_clock::now() - since_ >= std::chrono::seconds(timeout_);
  }
  WorkerFailure failure() const {
    return stalled_failure(
        timeout_, step_ >= 0 ? std::optional<int64_t>(static_cast<int64_t>(step_)) : std::nullopt);
  }

 private:
  long timeout_;
  double step_ = -1;  // -1: none seen yet
  bool answered_ = false;
  std::chrono::steady_clock::time_point since_;
};

enum class GangEnd { kSucceeded, kFailed, kStalled, kDeadline, kInterrupted };

// Ctrl-C (SIGINT) or SIGTERM to `kubetune run`: the workers, in a process group of their own, get
// SIGTERM like pods being drained, so they finish their step and checkpoint before we stop.
std::atomic<int> interrupted{0};
void on_interrupt(int signal) { interrupted = signal; }

// Installs the handler for the duration of a run, restoring what was there before.
class InterruptHandler {
 public:
  InterruptHandler() {
    interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptHandler() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

struct AttemptResult {
  GangEnd end = GangEnd::kSucceeded;
  std::optional<WorkerFailure> failure;  // kFailed, kStalled: as the operator would classify it
};

// A worker process's end, classified as the operator classifies a pod's (gang_policy.h).
WorkerFailure process_failure(const Exit& e) {
  return exited(e.index, "worker " + std::to_string(e.index), e.code,
                e.signaled ? "killed by signal " + std::to_string(e.code - 128) : "", "");
}

// Runs one gang until all succeed, one fails, or the deadline passes.
AttemptResult run_attempt(const FineTuneJob& job, const LocalRunOptions& o, int attempt,
                          const std::string& dir, std::chrono::steady_clock::time_point deadline,
                          std::ostream& out) {
  const Placement pl = place(job, o);
  const DesiredObjects want = desired_objects(job, attempt);
  ProcessGang gang(out);
  for (int rank = 0; rank < job.spec.workers.replicas; ++rank) {
    const int nproc = pl.gpus_per_worker > 0 ? pl.gpus_per_worker : 1;
    const std::string config = write_config(job, dir, rank, nproc);
    gang.spawn(to_process(want.pods[rank], job, o, pl, rank, config));
  }
  const auto stall_check_period = std::chrono::seconds(1);
  auto next_progress = std::chrono::steady_clock::now() + o.progress_period;
  auto next_stall_check = std::chrono::steady_clock::now() + stall_check_period;
  StallWatch stall(job.spec.metrics.port > 0 ? job.spec.run_policy.stall_timeout_seconds : 0);
  AttemptResult result;
  while (gang.running() > 0) {
    if (interrupted != 0) {
      gang.terminate(std::chrono::seconds(job.spec.run_policy.termination_grace_period_seconds));
      result.end = GangEnd::kInterrupted;
      return result;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      gang.terminate(o.grace);
      result.end = GangEnd::kDeadline;
      return result;
    }
    if (auto e = gang.wait_any(std::chrono::milliseconds(200))) {
      if (e->code != 0) {
        gang.terminate(o.grace);  // gang semantics: one down, all down
        result.end = GangEnd::kFailed;
        result.failure = process_failure(*e);
        return result;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_progress || now >= next_stall_check) {
      const auto progress = read_progress(job);
      stall.saw(progress);
      if (now >= next_progress && progress) print_progress(*progress, out);
      if (now >= next_progress) next_progress += o.progress_period;
      next_stall_check = now + stall_check_period;
    }
    if (stall.stalled()) {
      gang.terminate(o.grace);
      result.end = GangEnd::kStalled;
      result.failure = stall.failure();
      return result;
    }
  }
  gang.terminate(o.grace);
  return result;
}

// The run's own files (configs, links to its sources, an s3:// output or checkpoints before their
// upload).
std::string work_dir(const FineTuneJob& job, const LocalRunOptions& o) {
  if (!o.work_dir.empty()) return o.work_dir;
  if (!uploads_output(job.spec)) return job.spec.output.dir + "/.kubetune-local";
  return kubetune_cache_dir() + "/runs/" + job.ns + "/" + job.name;
}

// After the gang: GGUF files, the s3:// uploads, as rank 0's publish container does them.
int publish(const FineTuneJob& job, const LocalDirs& local, std::ostream& out) {
  std::vector<api::JobOutput> outputs;
  try {
    outputs = publish_output(job, local);
  } catch (const FetchFailed& e) {
    const bool permanent = classify_fetch_exit(e.exit_code, "").permanent;
    out << "[kubetune] " << job.name << " failed (" << to_string(Reason::kPublishFailed)
        << "): the trainer succeeded, publishing its output did not: " << e.what() << "\n";
    return permanent ? kExitUserError : 1;
  }
  out << "[kubetune] " << job.name << " succeeded\n";
  for (const auto& o : outputs)
    out << "[kubetune] output " << o.name.value_or("") << ": " << o.uri.value_or("") << "\n";
  return 0;
}

}  // namespace

int run_local(const FineTuneJob& job_as_written, const LocalRunOptions& o, std::ostream& out) {
  const std::string dir = work_dir(job_as_written, o);
  fs::create_directories(dir);
  // hf:// and s3:// sources first, into the cache on this machine, as the preflight pod does.
  FineTuneJob job;
  try {
    job = with_local_dirs(with_fetched_sources(job_as_written, dir + "/sources"), local_dirs(dir));
    restore_checkpoint(job, local_dirs(dir));
  } catch (const FetchFailed& e) {
    out << "[kubetune] " << job_as_written.name << " failed before starting: " << e.what() << "\n";
    // As a fetch container's end is judged in a pod: a source that cannot be fetched is the
    // user's to fix.
    return classify_fetch_exit(e.exit_code, "").permanent ? kExitUserError : 1;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      job.spec.run_policy.active_deadline_seconds
          ? start + std::chrono::seconds(*job.spec.run_policy.active_deadline_seconds)
          : std::chrono::steady_clock::time_point::max();
  // The preflight first: a bad line or a job too big for its GPUs fails before any worker starts.
  if (job.spec.run_policy.preflight) {
    const PreflightResult preflight = run_preflight(job, o.trainer, dir);
    out << "[kubetune] preflight: " << preflight_summary(preflight.report) << "\n" << std::flush;
    if (preflight.exit_code != 0) {
      out << "[kubetune] " << job.name << " failed before starting: preflight exited "
          << preflight.exit_code << " (kubetune plan prints the whole report)\n";
      return preflight.exit_code == kExitUserError ? kExitUserError : 1;
    }
  }
  InterruptHandler interrupt_handler;
  for (int restarts = 0;; ++restarts) {
    out << "[kubetune] starting " << job.spec.workers.replicas << " worker(s) of " << job.name
        << " (gang " << restarts << ")\n"
        << std::flush;
    const AttemptResult r = run_attempt(job, o, restarts, dir, deadline, out);
    if (r.end == GangEnd::kSucceeded) return publish(job, local_dirs(dir), out);
    if (r.end == GangEnd::kInterrupted) {
      out << "[kubetune] " << job.name << " interrupted (signal " << interrupted
          << "): the workers stopped after their step and checkpointed; run it again to resume\n";
      return 128 + interrupted;
    }
    if (r.end == GangEnd::kDeadline) {
      out << "[kubetune] " << job.name
          << " failed: activeDeadlineSeconds=" << *job.spec.run_policy.active_deadline_seconds
          << " exceeded\n";
      return 1;
    }
    // kFailed or kStalled: the operator's gang policy decides.
    const GangDecision decision = next(*r.failure, restarts, job.spec.run_policy.backoff_limit);
    if (!decision.restart) {
      out << "[kubetune] " << job.name << " failed (" << to_string(decision.reason)
          << "): " << decision.message << "\n";
      return r.failure->permanent ? kExitUserError : 1;
    }
    out << "[kubetune] " << to_string(decision.reason) << ": " << decision.message << "\n"
        << std::flush;
  }
}

std::string default_trainer_path(const std::string& argv0) {
  if (const char* env = std::getenv("KUBETUNE_TRAINER"); env && *env) return env;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = fs::absolute(argv0);
  const fs::path sibling = self.parent_path() / "kubetune-trainer";
  if (fs::exists(sibling)) return sibling.string();
  // The build tree keeps the trainer in its own folder.
  const fs::path in_build = self.parent_path().parent_path() / "trainer" / "kubetune-trainer";
  if (fs::exists(in_build)) return in_build.string();
  return "kubetune-trainer";
}

}  // namespace kubetune::op::local
