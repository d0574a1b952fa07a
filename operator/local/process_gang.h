// A gang of local processes standing in for a job's pods: started with posix_spawn in one
// process group (so one signal reaches them and all their children), their output prefixed
// line by line, stopped together with SIGTERM and, after a grace period, SIGKILL.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace kubetune::op::local {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is a path or a name on PATH
  std::vector<std::string> env;   // the complete environment, "KEY=value"
  std::string prefix;             // put before each output line, e.g. "[worker-0] "
};

struct Exit {
  int index = -1;  // which process
  int code = 0;    // exit status, or 128 + signal like a shell reports it
  bool signaled = false;
};

class ProcessGang {
 public:
  explicit ProcessGang(std::ostream& out) : out_(out) {}
  ~ProcessGang();

  // Throws std::runtime_error naming the program when it cannot be started.
  void spawn(const ProcessSpec& spec);
  // Waits up to `timeout` for some process to exit; nullopt when none did.
  std::optional<Exit> wait_any(std::chrono::milliseconds timeout);
  size_t running() const;
  // SIGTERM to the group, SIGKILL after `grace`, then reaps everything.
  void terminate(std::chrono::milliseconds grace);

 private:
  void pump_output(int fd, std::string prefix);

  std::ostream& out_;
  std::mutex out_mutex_;
  pid_t group_ = 0;
  std::vector<pid_t> pids_;  // 0 once reaped
  std::vector<std::thread> readers_;
};

}  // namespace kubetune::op::local
