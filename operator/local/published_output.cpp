#include "operator/local/published_output.h"

#include <nlohmann/json.hpp>

#include "operator/local/fetched_sources.h"
#include "operator/policy/outputs.h"
#include "operator/render/publish.h"

namespace kubetune::op::local {

std::string local_output_dir(const std::string& work_dir) { return work_dir + "/output"; }

FineTuneJob with_local_output_dir(const FineTuneJob& job, const std::string& local_dir) {
  FineTuneJob local = job;
  local.train_config = with_local_output(job.train_config, local_dir);
  return local;
}

std::vector<api::JobOutput> publish_output(const FineTuneJob& job, const std::string& local_dir) {
  if (!publishes(job.spec)) return job_outputs(job.spec, std::nullopt);
  const std::string dir = uploads_output(job.spec) ? local_dir : job.spec.output.dir;
  const std::string printed = run_kubetune_fetch(publish_arguments(job.spec, dir));
  const auto reported = nlohmann::json::parse(printed, nullptr, /*allow_exceptions=*/false);
  try {
    return reported.get<std::vector<api::JobOutput>>();
  } catch (const nlohmann::json::exception&) {
    throw FetchFailed(1, "kubetune-fetch publish printed no list of outputs: " + printed);
  }
}

}  // namespace kubetune::op::local
