// What happens to a run's output after the trainer: GGUF files (output.gguf) and the upload to
// an s3:// output.dir, by `kubetune-fetch publish` (fetch/kubetune_fetch/publish.py). In a pod it
// is a second container of rank 0's pod, `publish`, which waits for the trainer beside it to mark
// the output whole (common/contracts.h's kOutputCompleteFile) and then works on that folder: the
// GPUs stay held for those minutes (as a training service uploads /opt/ml/model from the training
// instance), but the output needs no volume that outlives the pod. With an s3:// output.dir the
// trainer writes to kOutputStagingDir, an emptyDir of each worker pod.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/finetunejob_types.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op {

inline constexpr const char* kPublishContainer = "publish";
inline constexpr const char* kOutputStagingDir = "/kubetune/output";

// Whether a run's output goes through kubetune-fetch publish (GGUF files, or an s3:// dir).
bool publishes(const api::TrainConfig& config);
// Whether output.dir is an s3:// prefix, which the trainer writes to a local folder first.
bool uploads_output(const api::TrainConfig& config);

// The trainer's config with an s3:// output.dir replaced by `local_dir`.
nlohmann::json with_local_output(nlohmann::json train_config, const std::string& local_dir);

// kubetune-fetch's arguments: publish LOCAL_DIR [--gguf TYPE]... [--to s3://...].
std::vector<std::string> publish_arguments(const api::TrainConfig& config,
                                           const std::string& local_dir);

// The staging emptyDir (an s3:// output.dir) and its mount in `trainer`, in every pod of the job
// (each rank writes its checkpoints under the output folder by default).
void add_output_staging(const api::FineTuneJobSpec& spec, k8s::PodSpec& pod,
                        k8s::Container& trainer);

// Rank 0's publish container, beside `trainer` (whose volume mounts it shares), when the job
// publishes. Its image is spec.sources.exportImage with output.gguf (llama.cpp's tools), else
// spec.sources.image.
void add_publish_container(const api::FineTuneJobSpec& spec, k8s::PodSpec& pod,
                           const k8s::Container& trainer);

}  // namespace kubetune::op
