#pragma once

#include <string>

namespace kubetune::metrics {

// Asks the OS for a currently free TCP port on `address` (bind to port 0, read it back, close).
// Another process may grab it before the caller binds, so callers retry on a bind failure.
// Throws std::runtime_error when `address` cannot be resolved or bound.
int pick_free_port(const std::string& address);

}  // namespace kubetune::metrics
