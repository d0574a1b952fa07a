// `kubetune run` of a two-worker CPU job, with tests/operator/fake_trainer.sh standing in for
// kubetune-trainer (KUBETUNE_CLI and FAKE_TRAINER come from ctest): what it printed and its exit
// status. Shared by the local runner's tests and the gang policy's test over both runners.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "common/yaml_file.h"
#include "operator/render/yaml_emit.h"
#include "test_support.h"

namespace kubetune::op::testing {

struct RunResult {
  int code = -1;
  std::string output;
};

// `dir`: the job's volume (its state/ folder holds what the fake trainer records); `mode`: the
// fake trainer's FAKE_MODE; `mutate` edits the manifest; `extra_env`: "VAR=value ..." for
// `kubetune run` itself.
inline RunResult run_local_job(const std::filesystem::path& dir, const std::string& mode,
                               const std::function<void(nlohmann::json&)>& mutate = {},
                               const std::string& extra_env = "") {
  nlohmann::json job =
      load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-cpu-hostpath.yaml");
  job["spec"]["volumes"][0]["mountPath"] = dir.string();
  job["spec"]["volumes"][0]["hostPath"]["path"] = dir.string();
  job["spec"]["output"]["dir"] = (dir / "out").string();
  job["spec"]["workers"]["replicas"] = 2;
  job["spec"]["workers"]["env"] = {
      {{"name", "FAKE_MODE"}, {"value", mode}},
      {{"name", "FAKE_STATE_DIR"}, {"value", (dir / "state").string()}}};
  job["spec"]["runPolicy"] = {{"backoffLimit", 2}};
  if (mutate) mutate(job);
  std::filesystem::create_directories(dir / "state");
  const std::string manifest = (dir / "job.yaml").string();
  std::ofstream(manifest) << op::json_to_yaml(job);
  const std::string cmd = extra_env +
                          " KUBETUNE_TRAINER=" + std::string(std::getenv("FAKE_TRAINER")) + " " +
                          std::getenv("KUBETUNE_CLI") + " run " + manifest + " 2>&1";
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace kubetune::op::testing
