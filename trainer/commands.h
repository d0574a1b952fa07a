#pragma once

namespace kubetune {

// Parses the command line and runs one sub-command; returns the process exit status:
// 0 success, 2 a problem with the user's config or data (permanent), 3 a failed collective
// (retryable), 1 anything else.
int run_cli(int argc, char** argv);

}  // namespace kubetune
