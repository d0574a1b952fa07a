// kubetune: the command line for FineTuneJob manifests without a cluster.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>
#include <vector>

#include "common/train_config.h"
#include "common/yaml_file.h"
#include "operator/api/crd.h"
#include "operator/api/job.h"
#include "operator/kube/objects.h"
#include "operator/local/local_runner.h"
#include "operator/local/preflight.h"
#include "operator/render/desired_objects.h"
#include "operator/render/workload.h"
#include "operator/render/yaml_emit.h"

namespace {

kubetune::op::FineTuneJob load_job(const std::string& path) {
  nlohmann::json obj = kubetune::load_yaml_or_json_file(path);
  // The API server refuses a manifest without them; so do we (a stored object always has them).
  for (const char* field : {"apiVersion", "kind"}) {
    if (obj.is_object() && !obj.contains(field)) {
      throw std::runtime_error(path + ": " + field + ": required field is missing");
    }
  }
  // No metadata.namespace: parse_job gives the job "default", as kubectl would.
  try {
    return kubetune::op::parse_job(obj);
  } catch (const kubetune::op::SpecError& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

int cmd_run(const std::string& file, kubetune::op::local::LocalRunOptions o) {
  return kubetune::op::local::run_local(load_job(file), o, std::cout);
}

// The trainer's preflight report for the job, as the cluster would run it; its exit status.
int cmd_plan(const std::string& file, const std::string& trainer, const std::string& work_dir) {
  const auto job = load_job(file);
  const auto r = kubetune::op::local::run_preflight(
      job, trainer, work_dir.empty() ? job.spec.output.dir + "/.kubetune-local" : work_dir);
  std::cout << r.output;
  return r.exit_code;
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

int cmd_render(const std::string& file) {
  const auto job = load_job(file);
  // The job's labels name its LocalQueue. Read first: metadata the Kubernetes types refuse (a label
  // that is not a string) stops the render before anything is printed.
  const kubetune::k8s::ObjectMeta metadata =
      kubetune::op::kube::metadata_of(kubetune::load_yaml_or_json_file(file));
  const auto objects = kubetune::op::desired_objects(job, 0);
  std::cout << kubetune::op::json_to_yaml(objects.config_map);
  if (objects.service) std::cout << "---\n" << kubetune::op::json_to_yaml(*objects.service);
  for (const auto& pod : objects.pods) std::cout << "---\n" << kubetune::op::json_to_yaml(pod);
  // Kueue's Workload, for a job labelled with a LocalQueue (instead of the pods, until admitted).
  namespace kueue = kubetune::op::kueue;
  if (const auto queue = kueue::queue_name(metadata)) {
    std::optional<kueue::Priority> priority;
    if (const auto name = kueue::priority_class(metadata)) priority = kueue::Priority{*name, 0};
    std::cout << "---\n# Kueue's Workload: no pod above is created until Kueue admits it."
              << (priority ? " spec.priority is\n# the WorkloadPriorityClass's value, which the "
                             "operator reads from the cluster."
                           : "")
              << "\n"
              << kubetune::op::json_to_yaml(kueue::workload(job, *queue, priority));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kubetune: FineTuneJob manifests without a cluster"};
  app.require_subcommand(1);

  kubetune::op::local::LocalRunOptions run_options;
  run_options.trainer = kubetune::op::local::default_trainer_path(argv[0]);
  std::string run_file;
  int progress_seconds = 10;
  auto* run = app.add_subcommand(
      "run",
      "run the FineTuneJob on this machine: its pods become local processes (local GPUs when "
      "present, CPU otherwise), with the operator's gang-restart and back-off policy");
  run->add_option("manifest", run_file, "FineTuneJob YAML")->required();
  run->add_option("--trainer", run_options.trainer, "kubetune-trainer to run")
      ->capture_default_str();
  run->add_option("--work-dir", run_options.work_dir,
                  "where the pods' files go (default: <output.dir>/.kubetune-local)");
  run->add_option("--progress-seconds", progress_seconds, "how often rank 0's progress is read")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));

  std::string plan_file, plan_trainer = run_options.trainer, plan_work_dir;
  auto* plan = app.add_subcommand(
      "plan",
      "the trainer's preflight on this machine's CPU: model, data (every invalid line), steps and "
      "estimated GPU memory as JSON; exit 2 when the data is invalid or the job does not fit "
      "workers.gpuMemoryGiB");
  plan->add_option("manifest", plan_file, "FineTuneJob YAML")->required();
  plan->add_option("--trainer", plan_trainer, "kubetune-trainer to run")->capture_default_str();
  plan->add_option("--work-dir", plan_work_dir,
                   "where the trainer config goes (default: <output.dir>/.kubetune-local)");

  std::vector<std::string> validate_files;
  auto* validate =
      app.add_subcommand("validate", "check manifests against the CRD schema and rules");
  validate->add_option("manifests", validate_files, "FineTuneJob YAML files")->required();

  std::string render_file;
  auto* render =
      app.add_subcommand("render", "print the ConfigMap, Service and pods the operator creates");
  render->add_option("manifest", render_file, "FineTuneJob YAML")->required();

  auto* crd = app.add_subcommand("crd", "print the FineTuneJob CRD");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*run) {
      run_options.progress_period = std::chrono::seconds(progress_seconds);
      return cmd_run(run_file, run_options);
    }
    if (*plan) return cmd_plan(plan_file, plan_trainer, plan_work_dir);
    if (*validate) return cmd_validate(validate_files);
    if (*render) return cmd_render(render_file);
    if (*crd) std::cout << kubetune::op::crd_yaml();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kubetune: " << e.what() << "\n";
    return 1;
  }
}
