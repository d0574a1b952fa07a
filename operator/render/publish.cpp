#include "operator/render/publish.h"

#include "common/source_forms.h"
#include "operator/render/pod_parts.h"
#include "operator/render/sources.h"

namespace kubetune::op {
namespace {

constexpr const char* kStagingVolume = "kubetune-output";
constexpr const char* kPublishTmpVolume = "kubetune-publish-tmp";

// Enough to hash and send files; a GGUF conversion streams tensors but wants more.
k8s::ResourceRequirements publish_resources(bool converts) {
  k8s::ResourceRequirements r;
  r.requests[kResourceCpu] = "500m";
  r.requests[kResourceMemory] = converts ? "4Gi" : "512Mi";
  r.limits[kResourceMemory] = converts ? "32Gi" : "2Gi";
  return r;
}

}  // namespace

bool uploads_output(const api::TrainConfig& config) { return is_remote_source(config.output.dir); }

bool uploads_checkpoints(const api::TrainConfig& config) {
  return is_remote_source(config.checkpoint.dir.value_or(""));
}

bool publishes(const api::TrainConfig& config) {
  return uploads_output(config) || uploads_checkpoints(config) || !config.output.gguf.empty();
}

nlohmann::json with_local_dirs(nlohmann::json train_config, const LocalDirs& local) {
  const std::pair<const char*, const std::string*> fields[] = {
      {"/output/dir", &local.output}, {"/checkpoint/dir", &local.checkpoints}};
  for (const auto& [pointer, dir] : fields) {
    const nlohmann::json::json_pointer at(pointer);
    if (train_config.contains(at) && train_config[at].is_string() &&
        is_remote_source(train_config[at].get<std::string>()))
      train_config[at] = *dir;
  }
  return train_config;
}

std::vector<std::string> publish_arguments(const api::TrainConfig& config, const LocalDirs& local) {
  std::vector<std::string> args = {"publish",
                                   uploads_output(config) ? local.output : config.output.dir};
  for (const auto& type : config.output.gguf) args.insert(args.end(), {"--gguf", type});
  if (uploads_output(config)) args.insert(args.end(), {"--to", config.output.dir});
  if (uploads_checkpoints(config)) {
    args.insert(args.end(), {"--sync-checkpoints", local.checkpoints, "--checkpoints-to",
                             *config.checkpoint.dir, "--keep-last",
                             std::to_string(config.checkpoint.keep_last)});
  }
  return args;
}

std::vector<std::string> restore_arguments(const api::TrainConfig& config,
                                           const std::string& local_dir) {
  if (!uploads_checkpoints(config)) return {};
  return {"--restore-checkpoint", *config.checkpoint.dir + "=" + local_dir};
}

void add_staging_dirs(const api::FineTuneJobSpec& spec, k8s::PodSpec& pod,
                      k8s::Container& trainer) {
  const std::pair<bool, std::pair<const char*, const char*>> dirs[] = {
      {uploads_output(spec), {kStagingVolume, kOutputStagingDir}},
      {uploads_checkpoints(spec), {kCheckpointStagingVolume, kCheckpointStagingDir}}};
  for (const auto& [wanted, volume] : dirs) {
    if (!wanted) continue;
    pod.volumes.push_back(empty_dir(volume.first));
    trainer.volume_mounts.push_back(volume_mount(volume.first, volume.second, std::nullopt));
  }
}

void add_publish_container(const api::FineTuneJobSpec& spec, k8s::PodSpec& pod,
                           const k8s::Container& trainer) {
  if (!publishes(spec)) return;
  k8s::Container publish;
  publish.name = kPublishContainer;
  publish.image = spec.output.gguf.empty() ? spec.sources.image : spec.sources.export_image;
  publish.command = {"kubetune-fetch"};  // both images install it; the export image's entrypoint
                                         // is its GGUF converter
  publish.args = publish_arguments(spec, kPodStagingDirs);
  publish.args.insert(publish.args.end(),
                      {"--wait-for-trainer", "--results", "/dev/termination-log"});
  add_store_access(spec.sources, publish);
  publish.resources = publish_resources(!spec.output.gguf.empty());
  publish.security_context = tool_security_context();
  // A publish that fails before writing its results still leaves its last log lines (the error).
  publish.termination_message_policy = "FallbackToLogsOnError";
  // The trainer's volumes but its config and /dev/shm: the output is on one of them.
  for (const auto& m : trainer.volume_mounts) {
    if (m.name != kConfigVolume && m.name != kShmVolume) publish.volume_mounts.push_back(m);
  }
  publish.volume_mounts.push_back(volume_mount(kPublishTmpVolume, "/tmp", std::nullopt));
  pod.volumes.push_back(empty_dir(kPublishTmpVolume));
  pod.containers.push_back(publish);
}

}  // namespace kubetune::op
