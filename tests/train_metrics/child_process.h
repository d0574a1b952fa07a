// A child process for tests that must never outlive them: its own process group, killed with
// everything it started (found through /proc) when the owner goes out of scope, and told to stop
// by the kernel (SIGTERM) if the test process itself dies, e.g. on a ctest timeout.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace kubetune::testing {

class ChildProcess {
 public:
  // Starts argv[0] (a path) with stdout and stderr appended to `log_path`. Throws on failure.
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  // Stops the process tree if it is still running (SIGTERM, then SIGKILL after 5 s).
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The exit status (WEXITSTATUS, or 128 + signal) once the process has ended, else nullopt.
  std::optional<int> poll();
  // Waits until the process ends or `timeout` passes; returns poll()'s answer.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void stop();

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Runs a command to completion (bounded by `timeout`, killed after it); returns its exit status.
int run_command(const std::vector<std::string>& argv, const std::string& log_path,
                std::chrono::milliseconds timeout);

// The last `max_bytes` of a file, for failure messages.
std::string file_tail(const std::string& path, std::size_t max_bytes = 3000);

}  // namespace kubetune::testing
