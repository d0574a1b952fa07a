// kubetune-fake-apiserver: serves the in-process fake over HTTP until SIGTERM/SIGINT, so the
// operator binary (or kubectl with a kubeconfig pointing at it) can be run against it by hand.
//   kubetune-fake-apiserver [--port N] [--token T] [--bookmark-ms N] [--history N]
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include "kubetune/kubefake/fake_api_server.h"

namespace {

// Set by the signal handler. A handler rather than sigwait(): cpprestsdk may start threads before
// main() blocks signals, and a stop signal delivered to one of them must still stop us cleanly.
volatile std::sig_atomic_t stop_signal = 0;

void on_stop_signal(int signal_number) { stop_signal = signal_number; }

struct Options {
  int port = 0;
  std::string token;
  int bookmark_ms = 1000;
  long history = -1;
};

int parse_int(const std::string& flag, const char* value) {
  try {
    size_t used = 0;
    int parsed = std::stoi(value, &used);
    if (used == std::strlen(value) && parsed >= 0) return parsed;
  } catch (const std::exception&) {
  }
  throw std::runtime_error("argument " + flag + ": expected a non-negative integer, got \"" +
                           value + "\"");
}

Options parse_args(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << "usage: kubetune-fake-apiserver [--port N] [--token T] [--bookmark-ms N] "
                   "[--history N]\n";
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::runtime_error("argument " + flag + ": missing value");
    const char* value = argv[++i];
    if (flag == "--port") {
      options.port = parse_int(flag, value);
    } else if (flag == "--token") {
      options.token = value;
    } else if (flag == "--bookmark-ms") {
      options.bookmark_ms = parse_int(flag, value);
    } else if (flag == "--history") {
      options.history = parse_int(flag, value);
    } else {
      throw std::runtime_error("unknown argument " + flag + " (try --help)");
    }
  }
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGINT, on_stop_signal);
  try {
    Options options = parse_args(argc, argv);
    kubetune::kubefake::FakeApiServer server(options.port);
    server.register_resource(
        {"kubetune.io", "v1alpha1", "finetunejobs", "FineTuneJob", true, true});
    server.set_bookmark_interval(std::chrono::milliseconds(options.bookmark_ms));
    if (!options.token.empty()) server.set_token(options.token);
    if (options.history >= 0) server.set_watch_history_limit(options.history);
    std::cout << "kubetune-fake-apiserver listening on " << server.url() << std::endl;
    while (stop_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::cout << "kubetune-fake-apiserver: stopping (signal " << stop_signal << ")" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "kubetune-fake-apiserver: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
