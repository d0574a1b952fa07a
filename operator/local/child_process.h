// A child process of `kubetune`, its stdout captured: the trainer's preflight and kubetune-fetch.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kubetune::op::local {

// Runs argv (argv[0] looked up on the PATH) with our environment and stderr; returns its exit
// status (128 + the signal's number when a signal ended it) and its stdout.
std::pair<int, std::string> run_capturing_stdout(const std::vector<std::string>& argv);

}  // namespace kubetune::op::local
