#include "operator/local/preflight.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "common/contracts.h"
#include "operator/api/desired_objects.h"
#include "operator/api/sources.h"

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

FineTuneJob with_fetched_sources(const FineTuneJob& job, const std::string& links_dir) {
  const std::vector<RemoteSource> sources = remote_sources(job.spec);
  if (sources.empty()) return job;
  const char* fetch = std::getenv("KUBETUNE_FETCH");
  const char* cache = std::getenv("KUBETUNE_SOURCE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string cache_dir =
      cache ? cache : std::string(home ? home : ".") + "/.cache/kubetune/sources";
  std::vector<std::string> argv = {fetch ? fetch : "kubetune-fetch"};
  for (auto& a : fetch_arguments(sources, {}, cache_dir, links_dir)) argv.push_back(a);
  int code = 0;
  try {
    code = run_capturing_stdout(argv).first;
  } catch (const std::exception& e) {
    throw FetchFailed(kExitUserError,
                      std::string(e.what()) +
                          " (hf:// and s3:// sources need kubetune-fetch: pip install ./fetch, "
                          "or set KUBETUNE_FETCH)");
  }
  if (code != 0) {
    throw FetchFailed(code, "kubetune-fetch exited " + std::to_string(code) +
                                " (its last lines above say why)");
  }
  FineTuneJob local = job;
  local.train_config = with_linked_sources(job.train_config, links_dir);
  return local;
}

PreflightResult run_preflight(const FineTuneJob& job, const std::string& trainer,
                              const std::string& work_dir) {
  std::filesystem::create_directories(work_dir);
  const std::string config = work_dir + "/preflight-config.json";
  std::ofstream(config) << job.train_config.dump(2) << "\n";
  std::vector<std::string> argv = preflight_command(job, config, job.spec.workers.gpu_memory_gib);
  argv[0] = trainer;
  PreflightResult r;
  std::tie(r.exit_code, r.output) = run_capturing_stdout(argv);
  r.report = parse_preflight_report(r.output);
  return r;
}

}  // namespace kubetune::op::local
