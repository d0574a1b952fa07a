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
inline constexpr const char* kCheckpointStagingDir = "/kubetune/checkpoints";
inline constexpr const char* kCheckpointStagingVolume = "kubetune-checkpoints";

// Whether a run's output goes through kubetune-fetch publish (GGUF files, an s3:// output.dir or
// checkpoint.dir).
bool publishes(const api::TrainConfig& config);
// Whether output.dir is an s3:// prefix, which the trainer writes to a local folder first.
bool uploads_output(const api::TrainConfig& config);
// Whether checkpoint.dir is an s3:// prefix: written to a local folder, uploaded as they appear,
// and the newest restored there before a gang starts.
bool uploads_checkpoints(const api::TrainConfig& config);

// Where the trainer writes what goes to S3: the local folders that stand for an s3:// output.dir
// and checkpoint.dir.
struct LocalDirs {
  std::string output, checkpoints;
};
inline const LocalDirs kPodStagingDirs = {kOutputStagingDir, kCheckpointStagingDir};

// The trainer's config with an s3:// output.dir and checkpoint.dir replaced by the local ones.
nlohmann::json with_local_dirs(nlohmann::json train_config, const LocalDirs& local);

// kubetune-fetch's arguments: publish OUTPUT_DIR [--gguf TYPE]... [--to s3://...]
// [--sync-checkpoints DIR --checkpoints-to s3://... --keep-last N].
std::vector<std::string> publish_arguments(const api::TrainConfig& config, const LocalDirs& local);

// The fetch container's argument that restores the newest checkpoint of an s3:// checkpoint.dir
// into `local_dir` (nothing otherwise).
std::vector<std::string> restore_arguments(const api::TrainConfig& config,
                                           const std::string& local_dir);

// The staging emptyDirs (an s3:// output.dir or checkpoint.dir) and their mounts in `trainer`, in
// every pod of the job (each rank writes its checkpoints under the output folder by default).
void add_staging_dirs(const api::FineTuneJobSpec& spec, k8s::PodSpec& pod, k8s::Container& trainer);

// Rank 0's publish container, beside `trainer` (whose volume mounts it shares), when the job
// publishes. Its image is spec.sources.exportImage with output.gguf (llama.cpp's tools), else
// spec.sources.image.
void add_publish_container(const api::FineTuneJobSpec& spec, k8s::PodSpec& pod,
                           const k8s::Container& trainer);

}  // namespace kubetune::op
