// kubetune-operator: reconciles FineTuneJobs. `kubetune-operator crd` prints the CRD.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "common/log.h"
#include "operator/api/crd.h"
#include "operator/render/yaml_emit.h"
#include "operator/runtime/manager.h"

namespace {

std::string identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return std::string(host) + "_" + std::to_string(rd() % 1000000);
}

// Where the leader-election Lease lives unless --lease-namespace says: the pod's own namespace
// (POD_NAMESPACE from the chart, or the service account's), else "default".
std::string default_lease_namespace() {
  if (const char* ns = std::getenv("POD_NAMESPACE"); ns && *ns) return ns;
  std::ifstream in("/var/run/secrets/kubernetes.io/serviceaccount/namespace");
  std::string ns;
  if (in >> ns && !ns.empty()) return ns;
  return "default";
}

// SIGTERM/SIGINT are taken by a thread of their own (sigwait), which stops the manager: the
// controllers finish their reconcile, the lease is released and main returns 0.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);  // main's "done" to the signal thread
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int run_operator(kubetune::op::ManagerOptions opts, kubetune::op::kube::ClientConfig client) {
  using kubetune::op::Manager;
  const sigset_t signals = block_stop_signals();
  Manager manager(std::move(client), opts);
  std::thread signal_thread([&manager, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGUSR1) return;  // main is done and wakes us to finish
    spdlog::info("signal {}: shutting down", sig);
    manager.stop();
  });
  manager.start();
  spdlog::info("kubetune-operator {} started; http {}:{}", opts.leader.identity, opts.http_address,
               manager.http_port());
  const Manager::Ended ended = manager.wait();
  manager.stop();  // returns once every thread is joined, whoever called stop() first
  pthread_kill(signal_thread.native_handle(), SIGUSR1);
  signal_thread.join();
  switch (ended) {
    case Manager::Ended::kStopped:
      return 0;
    case Manager::Ended::kLostLeadership:
      return 1;  // the pod restarts and campaigns again
    case Manager::Ended::kFatal:
      spdlog::critical("{}", manager.fatal_error());
      return 1;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kubetune::op;
  CLI::App app{"kubetune-operator: the FineTuneJob controller"};
  app.require_subcommand(0, 1);
  auto* crd_cmd =
      app.add_subcommand("crd", "print the FineTuneJob CustomResourceDefinition (YAML)");

  ManagerOptions opts;
  std::string kubeconfig;
  int progress_seconds = 15;
  opts.leader.lease_namespace = default_lease_namespace();
  opts.leader.identity = identity();
  app.add_option("--kubeconfig", kubeconfig, "default: $KUBECONFIG, in-cluster, ~/.kube/config");
  app.add_option("--namespace", opts.watch_namespace, "watch one namespace (default: all)");
  app.add_option("--workers", opts.workers, "parallel reconciles")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--leader-elect", opts.leader_elect, "elect a leader through a Lease")
      ->capture_default_str();
  app.add_option("--lease-namespace", opts.leader.lease_namespace,
                 "where the Lease lives (default: the pod's namespace, else \"default\")")
      ->capture_default_str();
  app.add_option("--lease-name", opts.leader.lease_name)->capture_default_str();
  app.add_option("--http-address", opts.http_address,
                 "address of /metrics, /healthz, /readyz (in a pod: its IP)")
      ->capture_default_str();
  app.add_option("--http-port", opts.http_port, "-1 = no HTTP endpoint")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  app.add_option("--progress-seconds", progress_seconds, "how often rank 0's metrics are read")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  double qps = 100;
  int burst = 200;
  app.add_option("--kube-api-qps", qps,
                 "requests per second to the API server, on average (0: no client-side limit)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100000.0));
  app.add_option("--kube-api-burst", burst, "requests to the API server at once after a pause")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  std::string log_format = "text";
  app.add_option("--log-format", log_format, "text, or json for cluster log pipelines")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  CLI11_PARSE(app, argc, argv);
  kubetune::log::setup(kubetune::log::parse_format(log_format), "operator");

  if (crd_cmd->parsed()) {
    std::cout << crd_yaml();
    return 0;
  }
  opts.reconciler.progress_period = std::chrono::seconds(progress_seconds);
  try {
    auto client = kubetune::op::kube::default_client_config(kubeconfig);
    client.qps = qps;
    client.burst = burst;
    return run_operator(opts, std::move(client));
  } catch (const std::exception& e) {
    spdlog::critical("kubetune-operator: {}", e.what());
    return 1;
  }
}
