// Small helpers shared by the operator tests.
#pragma once

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace kubetune::op::testing {

// The repository root, from the KUBETUNE_SOURCE_DIR environment variable set by CMake.
inline std::string source_dir() {
  const char* d = std::getenv("KUBETUNE_SOURCE_DIR");
  if (!d) throw std::runtime_error("KUBETUNE_SOURCE_DIR is not set (run the tests with ctest)");
  return d;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Polls `pred` until it holds or `timeout` passes; the tests never sleep a fixed time.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

// A pod's status as the kubelet writes it with its fetch init container in `state` (a
// ContainerState: running, waiting or terminated).
inline nlohmann::json fetch_container_status(const nlohmann::json& state,
                                             const std::string& phase = "Pending") {
  return {{"phase", phase},
          {"initContainerStatuses",
           {{{"name", "fetch"},
             {"ready", false},
             {"restartCount", 0},
             {"image", "x"},
             {"imageID", ""},
             {"state", state}}}}};
}

}  // namespace kubetune::op::testing
