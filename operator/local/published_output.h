// `kubetune run`'s publish step (operator/render/publish.h), once the gang has succeeded: the
// output's GGUF files and its upload to an s3:// output.dir, by kubetune-fetch publish on this
// machine, as rank 0's publish container does it in a pod. An s3:// output.dir is written to a
// folder of the run's work dir first (local_output_dir).
#pragma once

#include <string>
#include <vector>

#include "operator/api/job.h"

namespace kubetune::op::local {

// Where the trainer writes an s3:// output.dir on this machine, under the run's work dir.
std::string local_output_dir(const std::string& work_dir);

// The job with an s3:// output.dir replaced by `local_dir` in the trainer's config.
FineTuneJob with_local_output_dir(const FineTuneJob& job, const std::string& local_dir);

// Runs kubetune-fetch publish on the output (`local_dir` for an s3:// output.dir) when the job
// publishes; returns where each result is (status.outputs). FetchFailed when it fails.
std::vector<api::JobOutput> publish_output(const FineTuneJob& job, const std::string& local_dir);

}  // namespace kubetune::op::local
