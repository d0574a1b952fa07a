#include "operator/local/published_output.h"

#include "operator/local/fetched_sources.h"
#include "operator/policy/outputs.h"

namespace kubetune::op::local {

LocalDirs local_dirs(const std::string& work_dir) {
  return {work_dir + "/output", work_dir + "/checkpoints"};
}

FineTuneJob with_local_dirs(const FineTuneJob& job, const LocalDirs& local) {
  FineTuneJob out = job;
  out.train_config = op::with_local_dirs(job.train_config, local);
  return out;
}

void restore_checkpoint(const FineTuneJob& job, const LocalDirs& local) {
  const std::vector<std::string> args = restore_arguments(job.spec, local.checkpoints);
  if (!args.empty()) run_kubetune_fetch(args);
}

std::vector<api::JobOutput> publish_output(const FineTuneJob& job, const LocalDirs& local) {
  if (!publishes(job.spec)) return job_outputs(job.spec, std::nullopt);
  const std::string printed = run_kubetune_fetch(publish_arguments(job.spec, local));
  std::vector<api::JobOutput> reported = parse_job_outputs(printed);
  if (reported.empty())
    throw FetchFailed(1, "kubetune-fetch publish printed no list of outputs: " + printed);
  return reported;
}

}  // namespace kubetune::op::local
