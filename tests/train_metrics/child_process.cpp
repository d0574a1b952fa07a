#include "child_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace kubetune::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Parent pid of every process, from /proc/<pid>/stat ("pid (comm) state ppid ...").
std::multimap<pid_t, pid_t> children_by_parent() {
  std::multimap<pid_t, pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::strtol(entry->d_name, nullptr, 10));
    if (pid <= 0) continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');  // comm may contain spaces and parentheses
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 1));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid) out.emplace(ppid, pid);
  }
  closedir(proc);
  return out;
}

std::vector<pid_t> descendants(pid_t root) {
  const auto tree = children_by_parent();
  std::vector<pid_t> out;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t parent = todo.back();
    todo.pop_back();
    auto [begin, end] = tree.equal_range(parent);
    for (auto it = begin; it != end; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

int decode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& args, const std::string& log_path) {
  if (args.empty()) throw std::invalid_argument("ChildProcess: empty command");
  // Prepared before fork(): the child may only make async-signal-safe calls, since this process
  // runs other threads (cpprestsdk's pool).
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open " + log_path + ": " + std::strerror(errno));
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(126);  // the test died between fork() and prctl()
    ::dup2(log_fd, STDOUT_FILENO);
    ::dup2(log_fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
}

ChildProcess::~ChildProcess() { stop(); }

std::optional<int> ChildProcess::poll() {
  if (status_ || pid_ <= 0) return status_;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) status_ = decode(status);
  return status_;
}

std::optional<int> ChildProcess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!poll() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return status_;
}

void ChildProcess::stop() {
  if (pid_ <= 0 || poll()) return;
  // Collected first: once the parent is gone its children are re-parented and harder to find.
  const std::vector<pid_t> tree = descendants(pid_);
  ::kill(pid_, SIGTERM);  // the trainer's launcher forwards it to every rank
  wait(std::chrono::milliseconds(5000));
  for (pid_t p : tree)
    ::kill(p, SIGKILL);  // ranks that did not stop in time (or lost the launcher)
  if (!status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    status_ = decode(status);
  }
}

int run_command(const std::vector<std::string>& argv, const std::string& log_path,
                std::chrono::milliseconds timeout) {
  ChildProcess child(argv, log_path);
  if (auto status = child.wait(timeout)) return *status;
  child.stop();
  throw std::runtime_error(argv[0] + " did not finish within " + std::to_string(timeout.count()) +
                           " ms; log: " + log_path);
}

std::string file_tail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text.size() > max_bytes ? text.substr(text.size() - max_bytes) : text;
}

}  // namespace kubetune::testing
