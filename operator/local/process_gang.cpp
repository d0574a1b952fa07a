#include "operator/local/process_gang.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace kubetune::op::local {
namespace {

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

Exit decode(int index, int status) {
  Exit e;
  e.index = index;
  if (WIFEXITED(status)) {
    e.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.code = 128 + WTERMSIG(status);
  }
  return e;
}

}  // namespace

ProcessGang::~ProcessGang() { terminate(std::chrono::milliseconds(2000)); }

void ProcessGang::spawn(const ProcessSpec& spec) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe: " + std::string(strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, group_);  // 0: the first process leads a new group
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  std::vector<std::string> argv = spec.argv, env = spec.env;
  auto c_argv = c_strings(argv);
  auto c_env = c_strings(env);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, c_argv[0], &actions, &attr, c_argv.data(), c_env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw std::runtime_error("cannot start " + spec.argv[0] + ": " + strerror(rc));
  }
  if (group_ == 0) group_ = pid;
  pids_.push_back(pid);
  readers_.emplace_back([this, fd = fds[0], prefix = spec.prefix] { pump_output(fd, prefix); });
}

void ProcessGang::pump_output(int fd, std::string prefix) {
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      std::lock_guard<std::mutex> lock(out_mutex_);
      out_ << prefix << pending.substr(0, nl) << "\n" << std::flush;
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) {
    std::lock_guard<std::mutex> lock(out_mutex_);
    out_ << prefix << pending << "\n" << std::flush;
  }
  close(fd);
}

size_t ProcessGang::running() const {
  size_t n = 0;
  for (pid_t p : pids_) n += p != 0;
  return n;
}

std::optional<Exit> ProcessGang::wait_any(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] == 0) continue;
      int status = 0;
      if (waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
        pids_[i] = 0;
        return decode(static_cast<int>(i), status);
      }
    }
    if (running() == 0 || std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ProcessGang::terminate(std::chrono::milliseconds grace) {
  if (group_ != 0 && running() > 0) {
    kill(-group_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (running() > 0 && std::chrono::steady_clock::now() < deadline) {
      wait_any(std::chrono::milliseconds(50));
    }
    if (running() > 0) kill(-group_, SIGKILL);
    while (running() > 0) wait_any(std::chrono::milliseconds(50));
    kill(-group_, SIGKILL);  // grandchildren that outlived their parent still hold the pipes
  }
  for (auto& t : readers_) t.join();
  readers_.clear();
  pids_.clear();
  group_ = 0;
}

}  // namespace kubetune::op::local
