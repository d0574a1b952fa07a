// `kubetune run`'s side of what goes to S3 (operator/render/publish.h), as a pod's containers do
// it: before the gang, the newest checkpoint of an s3:// checkpoint.dir is restored (the fetch
// container's part); once the gang has succeeded, the output's GGUF files are made and the output
// and checkpoints uploaded by kubetune-fetch publish (rank 0's publish container's part). An
// s3:// output.dir or checkpoint.dir is written to a folder of the run's work dir first.
#pragma once

#include <string>
#include <vector>

#include "operator/api/job.h"
#include "operator/render/publish.h"

namespace kubetune::op::local {

// Where the trainer writes an s3:// output.dir and checkpoint.dir on this machine.
LocalDirs local_dirs(const std::string& work_dir);

// The job whose trainer config names those folders instead of s3:// prefixes.
FineTuneJob with_local_dirs(const FineTuneJob& job, const LocalDirs& local);

// The newest whole checkpoint of an s3:// checkpoint.dir into local.checkpoints (nothing for
// another job). FetchFailed when it fails.
void restore_checkpoint(const FineTuneJob& job, const LocalDirs& local);

// Runs kubetune-fetch publish when the job publishes; returns where each result is
// (status.outputs). FetchFailed when it fails.
std::vector<api::JobOutput> publish_output(const FineTuneJob& job, const LocalDirs& local);

}  // namespace kubetune::op::local
