// status.outputs: where a Succeeded job's results are. Rank 0's publish container reports them
// (the s3:// URIs it uploaded to, the GGUF files it made); without one they are the folders the
// trainer wrote, as the spec names them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/finetunejob_types.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op {

std::vector<api::JobOutput> job_outputs(const api::TrainConfig& config,
                                        const std::optional<k8s::Pod>& rank0);

// kubetune-fetch publish's report (its stdout, its container's termination message), or an empty
// list when `text` is not one: anything in the pod may write there, so it is not trusted.
std::vector<api::JobOutput> parse_job_outputs(const std::string& text);

}  // namespace kubetune::op
