#include "operator/local/preflight.h"

#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include "operator/local/child_process.h"
#include "operator/render/desired_objects.h"

namespace kubetune::op::local {

PreflightResult run_preflight(const FineTuneJob& job, const std::string& trainer,
                              const std::string& work_dir) {
  std::filesystem::create_directories(work_dir);
  const std::string config = work_dir + "/preflight-config.json";
  std::ofstream(config) << job.train_config.dump(2) << "\n";
  std::vector<std::string> argv = preflight_command(job, config, job.spec.workers.gpu_memory_gib);
  argv[0] = trainer;
  PreflightResult r;
  std::tie(r.exit_code, r.output) = run_capturing_stdout(argv);
  r.report = parse_preflight_report(r.output);
  return r;
}

}  // namespace kubetune::op::local
