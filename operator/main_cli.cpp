// kubetune: the command line for FineTuneJob manifests without a cluster.
#include <iostream>
#include <string>
#include <vector>

#include "common/train_config.h"
#include "operator/api/crd.h"
#include "operator/api/desired_objects.h"
#include "operator/api/job.h"
#include "operator/api/yaml_emit.h"
#include "operator/local/local_runner.h"

namespace {

const char* kUsage = R"(usage:
  kubetune run JOB.yaml [--trainer PATH] [--work-dir DIR] [--progress-seconds N]
      run the FineTuneJob on this machine: its pods become local processes (local GPUs when
      present, CPU otherwise), with the operator's gang-restart and back-off policy
  kubetune validate JOB.yaml...   check manifests against the CRD schema and rules
  kubetune render JOB.yaml         print the ConfigMap, Service and pods the operator creates
  kubetune crd                     print the FineTuneJob CRD
)";

kubetune::op::FineTuneJob load_job(const std::string& path) {
  nlohmann::json obj = kubetune::load_yaml_or_json_file(path);
  if (obj.is_object() && !obj["metadata"].contains("namespace")) {
    obj["metadata"]["namespace"] = "default";
  }
  try {
    return kubetune::op::parse_job(obj);
  } catch (const kubetune::op::SpecError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

int cmd_run(const std::vector<std::string>& args, const char* argv0) {
  kubetune::op::local::LocalRunOptions o;
  o.trainer = kubetune::op::local::default_trainer_path(argv0);
  std::string file;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--trainer" && i + 1 < args.size())
      o.trainer = args[++i];
    else if (args[i] == "--work-dir" && i + 1 < args.size())
      o.work_dir = args[++i];
    else if (args[i] == "--progress-seconds" && i + 1 < args.size()) {
      o.progress_period = std::chrono::seconds(std::stoi(args[++i]));
    } else if (file.empty() && args[i].rfind("--", 0) != 0)
      file = args[i];
    else
      throw std::runtime_error("run: unexpected argument " + args[i] + "\n" + kUsage);
  }
  if (file.empty()) throw std::runtime_error(std::string("run: which manifest?\n") + kUsage);
  return kubetune::op::local::run_local(load_job(file), o, std::cout);
}

int cmd_validate(const std::vector<std::string>& files) {
  int bad = 0;
  for (const auto& f : files) {
    try {
      load_job(f);
      std::cout << f << ": valid\n";
    } catch (const std::exception& e) {
      std::cout << e.what() << "\n";
      ++bad;
    }
  }
  return bad ? 1 : 0;
}

int cmd_render(const std::vector<std::string>& args) {
  if (args.size() != 1) throw std::runtime_error(std::string("render: one manifest\n") + kUsage);
  const auto job = load_job(args[0]);
  const auto objects = kubetune::op::desired_objects(job, 0);
  std::cout << kubetune::op::json_to_yaml(objects.config_map) << "---\n"
            << kubetune::op::json_to_yaml(objects.service);
  for (const auto& pod : objects.pods) std::cout << "---\n" << kubetune::op::json_to_yaml(pod);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::cout << kUsage;
    return args.empty() ? 1 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "run") return cmd_run(args, argv[0]);
    if (cmd == "validate") return cmd_validate(args);
    if (cmd == "render") return cmd_render(args);
    if (cmd == "crd") {
      std::cout << kubetune::op::crd_yaml();
      return 0;
    }
    std::cerr << "kubetune: unknown command " << cmd << "\n" << kUsage;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kubetune: " << e.what() << "\n";
    return 1;
  }
}
