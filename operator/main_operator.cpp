// kubetune-operator: reconciles FineTuneJobs. `kubetune-operator crd` prints the CRD.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <thread>

#include "operator/api/crd.h"
#include "operator/controller/manager.h"

namespace {

const char* kUsage = R"(usage:
  kubetune-operator crd                 print the FineTuneJob CustomResourceDefinition (YAML)
  kubetune-operator [options]           run the controller
options:
  --kubeconfig PATH        default: $KUBECONFIG, in-cluster, ~/.kube/config
  --namespace NS           watch one namespace (default: all)
  --workers N              parallel reconciles (default 2)
  --leader-elect BOOL      default true
  --lease-namespace NS     default: the pod's namespace (POD_NAMESPACE) or "default"
  --lease-name NAME        default kubetune-operator
  --http-port PORT         /metrics, /healthz, /readyz (default 8080)
  --progress-seconds N     how often rank 0's metrics are read (default 15)
)";

std::string identity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  return std::string(host) + "_" + std::to_string(rd() % 1000000);
}

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  throw std::runtime_error(flag + ": expected true or false, got \"" + v + "\"");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kubetune::op;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "crd") {
    std::cout << crd_yaml();
    return 0;
  }
  try {
    ManagerOptions opts;
    std::string kubeconfig;
    const char* pod_ns = std::getenv("POD_NAMESPACE");
    opts.leader.lease_namespace = pod_ns ? pod_ns : "default";
    opts.leader.identity = identity();
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "-h" || a == "--help") {
        std::cout << kUsage;
        return 0;
      }
      if (i + 1 >= args.size()) throw std::runtime_error(a + ": missing value\n" + kUsage);
      const std::string v = args[++i];
      if (a == "--kubeconfig")
        kubeconfig = v;
      else if (a == "--namespace")
        opts.watch_namespace = v;
      else if (a == "--workers")
        opts.workers = std::stoi(v);
      else if (a == "--leader-elect")
        opts.leader_elect = parse_bool(a, v);
      else if (a == "--lease-namespace")
        opts.leader.lease_namespace = v;
      else if (a == "--lease-name")
        opts.leader.lease_name = v;
      else if (a == "--http-port")
        opts.http_port = std::stoi(v);
      else if (a == "--progress-seconds") {
        opts.reconciler.progress_period = std::chrono::seconds(std::stoi(v));
      } else {
        throw std::runtime_error("unknown option " + a + "\n" + kUsage);
      }
    }
    // SIGTERM/SIGINT end the operator cleanly (lease released) from a dedicated thread.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    Manager manager(kubetune::op::kube::default_client_config(kubeconfig), opts);
    std::thread([&manager, signals] {
      int sig = 0;
      sigwait(&signals, &sig);
      std::clog << "signal " << sig << ": shutting down\n";
      manager.stop();
    }).detach();
    manager.start();
    std::clog << "kubetune-operator " << opts.leader.identity << " started; http port "
              << manager.http_port() << "\n";
    const bool lost = manager.wait();
    manager.stop();
    return lost ? 1 : 0;  // a lost lease restarts the pod, which campaigns again
  } catch (const std::exception& e) {
    std::cerr << "kubetune-operator: " << e.what() << "\n";
    return 1;
  }
}
