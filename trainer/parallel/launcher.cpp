#include "trainer/parallel/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "common/log.h"

namespace kubetune::parallel {
namespace {

std::atomic<int> g_forward_signal{0};
void remember_signal(int sig) { g_forward_signal = sig; }

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int out_fd = -1;
  std::thread reader;
};

std::mutex g_output_mutex;

// Copies a child's stdout to ours, one whole line at a time, each prefixed with "[rank N] " (not
// with JSON logs, whose lines must stay JSON and carry the rank themselves). Its logs go to the
// inherited stderr and name the rank.
void pump_lines(int fd, int rank) {
  std::string pending;
  char buf[4096];
  const std::string prefix = log::format_from_env() == log::Format::kJson
                                 ? std::string()
                                 : "[rank " + std::to_string(rank) + "] ";
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t newline;
    while ((newline = pending.find('\n')) != std::string::npos) {
      std::lock_guard<std::mutex> lock(g_output_mutex);
      std::cout << prefix << pending.substr(0, newline + 1) << std::flush;
      pending.erase(0, newline + 1);
    }
  }
  if (!pending.empty()) {
    std::lock_guard<std::mutex> lock(g_output_mutex);
    std::cout << prefix << pending << "\n" << std::flush;
  }
  close(fd);
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

int exit_code_for(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

Child spawn(int rank, int local_rank, const LaunchOptions& o, int local_world,
            const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  std::map<std::string, std::string> env = o.node.process_environment(local_rank, local_world);
  // CPU workers share the cores instead of each starting one thread per core.
  if (!getenv("OMP_NUM_THREADS") && !torch::cuda::is_available())
    env["OMP_NUM_THREADS"] =
        std::to_string(std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN) / local_world));
  const pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // its own group: stopping a rank stops everything it started
    // A rank never outlives its launcher: killed with SIGKILL (the kubelet after the grace
    // period, `kubetune run` stopping a gang), the launcher cannot forward anything, and an
    // orphaned rank would hold its GPU and port. The check after prctl covers a launcher that
    // died before it.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(127);
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    std::string self = "/proc/self/exe";
    argv.push_back(const_cast<char*>("kubetune-trainer"));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(self.c_str(), argv.data());
    std::fprintf(stderr, "exec failed: %s\n", strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(pipe_fds[1]);
  Child c;
  c.rank = rank;
  c.pid = pid;
  c.out_fd = pipe_fds[0];
  c.reader = std::thread(pump_lines, c.out_fd, rank);
  return c;
}

void signal_all(std::vector<Child>& children, const std::map<pid_t, int>& finished, int sig) {
  for (auto& c : children)
    if (!finished.count(c.pid)) kill(-c.pid, sig);
}

// Records the wait status of every child that has ended since the last call.
void reap(std::map<pid_t, int>& finished) {
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) finished[pid] = status;
}

}  // namespace

int launch(const LaunchOptions& o, const std::vector<std::string>& child_args) {
  int local_world = o.node.nproc_per_node;
  if (local_world <= 0)
    local_world = std::max<int>(1, static_cast<int>(torch::cuda::device_count()));
  const int world = local_world * o.node.nnodes;
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);

  std::vector<Child> children;
  for (int i = 0; i < local_world; ++i)
    children.push_back(spawn(o.node.node_rank * local_world + i, i, o, local_world, child_args));
  log::info() << "started " << local_world << " process(es), world size " << world << ", master "
              << o.node.master_addr << ":" << o.node.master_port;

  std::map<pid_t, int> finished;
  int result = 0;
  // Stopping because a rank failed: the others get SIGTERM, then SIGKILL after the grace time.
  // Stopping because we were signalled (pod deletion, Ctrl-C): the ranks checkpoint and exit on
  // their own, their status is ours, and the pod's grace period is the only deadline.
  bool stopping = false, signalled = false;
  using Clock = std::chrono::steady_clock;
  Clock::time_point kill_at = Clock::time_point::max();  // max: nobody to kill
  while (finished.size() < children.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    reap(finished);
    if (int sig = g_forward_signal.exchange(0); sig != 0) {
      log::warn() << "received signal " << sig << " (" << strsignal(sig)
                  << "), forwarding to all ranks: they stop after the current step";
      signal_all(children, finished, sig);
      if (!stopping) stopping = signalled = true;
    }
    for (const auto& c : children) {
      auto it = finished.find(c.pid);
      if (it == finished.end() || it->second == 0) continue;
      if (signalled) {
        if (result == 0) result = exit_code_for(it->second);
        continue;
      }
      if (stopping) continue;
      log::error() << "rank " << c.rank << " (pid " << c.pid << ") " << describe(it->second)
                   << "; stopping the other ranks";
      result = exit_code_for(it->second);
      stopping = true;
      signal_all(children, finished, SIGTERM);
      kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int>(o.grace_seconds * 1000));
    }
    if (Clock::now() > kill_at) {
      signal_all(children, finished, SIGKILL);
      kill_at = Clock::time_point::max();
    }
  }
  for (auto& c : children) c.reader.join();
  if (result == 0) log::info() << "all " << children.size() << " rank(s) finished";
  return result;
}

int launch_main(const std::vector<std::string>& args) {
  // Everything after "--" is the command each rank runs, passed on untouched.
  const auto split = std::find(args.begin(), args.end(), std::string("--"));
  std::vector<std::string> own(args.begin(), split);
  const std::vector<std::string> child = split == args.end()
                                             ? std::vector<std::string>{}
                                             : std::vector<std::string>(split + 1, args.end());

  LaunchOptions o;
  o.node = LaunchContract::from_environment();  // the pod's (or kubetune run's) environment
  std::string nproc = o.node.nproc_per_node > 0 ? std::to_string(o.node.nproc_per_node) : "auto";
  CLI::App app{
      "kubetune-trainer launch: start one process per GPU (or one CPU worker) of this "
      "node, torchrun-compatible; stops every rank when one fails",
      "kubetune-trainer launch"};
  app.footer(
      "usage: kubetune-trainer launch --nproc-per-node N|auto [--nnodes M --node-rank R "
      "--master-addr A --master-port P] -- train --config FILE\n"
      "Without a flag its value comes from the environment (NPROC_PER_NODE, NNODES, NODE_RANK, "
      "MASTER_ADDR, MASTER_PORT), as the operator's pods and kubetune run set it.");
  app.add_option("--nproc-per-node,--nproc_per_node", nproc,
                 "processes on this node: a number, or auto (one per visible GPU, else 1)")
      ->capture_default_str();
  app.add_option("--nnodes", o.node.nnodes, "nodes (pods) in the job")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  app.add_option("--node-rank,--node_rank", o.node.node_rank, "this node's rank, 0..nnodes-1")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr,--master_addr", o.node.master_addr, "rank 0's node")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", o.node.master_port, "rendezvous port on it")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  std::reverse(own.begin(), own.end());  // CLI11 parses a reversed vector
  try {
    app.parse(own);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    if (code == 0) return 0;  // --help
    throw std::runtime_error("launch: invalid arguments (see launch --help)");
  }
  if (nproc == "auto") {
    o.node.nproc_per_node = 0;
  } else {
    try {
      o.node.nproc_per_node = std::stoi(nproc);
    } catch (const std::exception&) {
      throw std::runtime_error("launch: --nproc-per-node expects a number or auto, got '" + nproc +
                               "'");
    }
    if (o.node.nproc_per_node < 1)
      throw std::runtime_error("launch: --nproc-per-node must be >= 1");
  }
  if (child.empty()) throw std::runtime_error("launch: nothing to run; put the command after '--'");
  if (o.node.node_rank >= o.node.nnodes)
    throw std::runtime_error("launch: --node-rank must be in [0, --nnodes)");
  return launch(o, child);
}

}  // namespace kubetune::parallel
