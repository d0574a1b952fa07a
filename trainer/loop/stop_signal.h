// SIGTERM is how Kubernetes takes a pod away (node drain, eviction, spot reclaim), and SIGINT how
// a person at a terminal does: both ask the run to stop after the step it is in, write a
// checkpoint, and exit with kExitRetryable so that the gang is restarted and resumes from it.
// The ranks agree on the step through the step's own all-reduce (a drain signals only the pods
// of one node), so the request costs no extra collective. A second signal kills at once.
#pragma once

namespace kubetune::train {

// Installs the handlers; call once, before training starts.
void install_stop_handlers();

// Whether this process has received SIGTERM or SIGINT.
bool stop_requested();

}  // namespace kubetune::train
