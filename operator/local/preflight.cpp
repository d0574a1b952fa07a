#include "operator/local/preflight.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

extern char** environ;

namespace kubetune::op::local {
namespace {

// Runs argv with our environment and stderr, returning its exit status and stdout.
std::pair<int, std::string> run_capturing_stdout(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> c_argv;
  for (const auto& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, c_argv[0], &actions, nullptr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw std::runtime_error("cannot start " + argv[0] + ": " + std::strerror(rc));
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

}  // namespace

PreflightResult run_preflight(const FineTuneJob& job, const std::string& trainer,
                              const std::string& work_dir) {
  std::filesystem::create_directories(work_dir);
  const std::string config = work_dir + "/preflight-config.json";
  std::ofstream(config) << job.train_config.dump(2) << "\n";
  const int world = job.workers.replicas * std::max(1, job.workers.gpus);
  std::vector<std::string> argv = {trainer, "preflight",    "--config",
                                   config,  "--world-size", std::to_string(world)};
  if (job.workers.gpu_memory_gib) {
    argv.push_back("--gpu-memory-gib");
    argv.push_back(std::to_string(*job.workers.gpu_memory_gib));
  }
  PreflightResult r;
  std::tie(r.exit_code, r.output) = run_capturing_stdout(argv);
  r.report = nlohmann::json::parse(r.output, nullptr, /*allow_exceptions=*/false);
  if (r.report.is_discarded()) r.report = nullptr;
  return r;
}

std::string preflight_summary(const nlohmann::json& report) {
  if (!report.is_object()) return "no report";
  const auto& train =
      report.value("data", nlohmann::json::object()).value("train", nlohmann::json::object());
  char memory[64];
  std::snprintf(memory, sizeof memory, "est. %.1f GiB per GPU",
                report.value("memory", nlohmann::json::object()).value("totalGiB", 0.0));
  std::string line =
      std::to_string(report.value("steps", nlohmann::json::object()).value("total", 0L)) +
      " steps, " + std::to_string(train.value("records", 0L)) + " records, " +
      std::to_string(train.value("tokens", 0L)) + " tokens, " + memory + ": " +
      report.value("verdict", "?");
  if (report.contains("message")) line += ": " + report["message"].get<std::string>();
  return line;
}

}  // namespace kubetune::op::local
