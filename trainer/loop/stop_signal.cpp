#include "trainer/loop/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace kubetune::train {
namespace {

std::atomic<int> g_stop_signal{0};

void remember_stop(int sig) { g_stop_signal.store(sig); }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = remember_stop;
  sigemptyset(&sa.sa_mask);
  // One-shot: the handler is reset to the default after the first signal, so a second
  // SIGTERM/SIGINT kills the process (the way out of a run that cannot reach its next step).
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() { return g_stop_signal.load() != 0; }

}  // namespace kubetune::train
