#include "operator/render/sources.h"

#include "common/source_forms.h"
#include "operator/render/pod_parts.h"
#include "operator/render/publish.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

constexpr const char* kCacheVolume = "kubetune-source-cache";
constexpr const char* kLinksVolume = "kubetune-sources";
constexpr const char* kTmpVolume = "kubetune-fetch-tmp";  // HOME and the clients' own caches

// The shared claim when there is one: fetched once for every pod and every later job.
k8s::Volume cache_volume(const api::Sources& sources) {
  if (!sources.cache_claim) return empty_dir(kCacheVolume);
  k8s::PersistentVolumeClaimVolumeSource claim;
  claim.claim_name = *sources.cache_claim;
  k8s::Volume v;
  v.name = kCacheVolume;
  v.persistent_volume_claim = claim;
  return v;
}

}  // namespace

std::vector<RemoteSource> remote_sources(const api::TrainConfig& config) {
  std::vector<RemoteSource> out;
  if (is_remote_source(config.model.path)) out.push_back({"model", config.model.path});
  if (is_remote_source(config.data.train)) out.push_back({"train", config.data.train});
  if (config.data.validation && is_remote_source(*config.data.validation)) {
    out.push_back({"validation", *config.data.validation});
  }
  return out;
}

json with_linked_sources(json train_config, const std::string& links_dir) {
  // The trainer's config file stays JSON as validated; only these paths change, each to the link
  // remote_sources() names it by.
  const std::pair<const char*, const char*> fields[] = {
      {"/model/path", "model"}, {"/data/train", "train"}, {"/data/validation", "validation"}};
  for (const auto& [pointer, name] : fields) {
    const json::json_pointer at(pointer);
    if (!train_config.contains(at) || !train_config[at].is_string()) continue;
    if (!is_remote_source(train_config[at].get<std::string>())) continue;
    train_config[at] = links_dir + "/" + name;
  }
  return train_config;
}

std::vector<std::string> fetch_arguments(const std::vector<RemoteSource>& sources,
                                         const std::vector<api::FetchedSource>& pins,
                                         const std::string& cache_dir,
                                         const std::string& links_dir) {
  std::vector<std::string> args = {"--cache", cache_dir, "--link-dir", links_dir};
  for (const auto& pin : pins) {
    if (pin.source && pin.revision)
      args.insert(args.end(), {"--pin", *pin.source + "=" + *pin.revision});
  }
  for (const auto& s : sources) args.push_back(s.name + "=" + s.source);
  return args;
}

void add_store_access(const api::Sources& sources, k8s::Container& tool) {
  tool.env.push_back(env_var("HOME", "/tmp"));  // the clients' caches; the image's user has none
  if (sources.hf_endpoint) tool.env.push_back(env_var("HF_ENDPOINT", *sources.hf_endpoint));
  if (sources.s3_endpoint) tool.env.push_back(env_var("AWS_ENDPOINT_URL", *sources.s3_endpoint));
  if (sources.credentials_secret) {
    // The credentials reach kubetune-fetch's containers only, never the trainer's.
    k8s::SecretEnvSource secret;
    secret.name = *sources.credentials_secret;
    k8s::EnvFromSource from;
    from.secret_ref = secret;
    tool.env_from = {from};
  }
}

k8s::SecurityContext tool_security_context() {
  k8s::Capabilities none;
  none.drop = {"ALL"};
  k8s::SecurityContext s;
  s.allow_privilege_escalation = false;
  s.capabilities = none;
  s.read_only_root_filesystem = true;
  return s;
}

void add_fetch_container(const api::FineTuneJobSpec& spec,
                         const std::vector<api::FetchedSource>& pins, k8s::PodSpec& pod,
                         k8s::Container& trainer, const k8s::ResourceRequirements& resources,
                         bool restores) {
  const std::vector<RemoteSource> sources = remote_sources(spec);
  const std::vector<std::string> restore =
      restores ? restore_arguments(spec, kCheckpointStagingDir) : std::vector<std::string>{};
  if (sources.empty() && restore.empty()) return;
  k8s::Container fetch;
  fetch.name = kFetchContainer;
  fetch.image = spec.sources.image;
  fetch.args = fetch_arguments(sources, pins, kSourceCacheDir, kSourcesDir);
  fetch.args.insert(fetch.args.end(), restore.begin(), restore.end());
  fetch.args.insert(fetch.args.end(), {"--results", "/dev/termination-log", "--metrics-port",
                                       std::to_string(kFetchMetricsPort)});
  k8s::ContainerPort progress;
  progress.name = "fetch-progress";
  progress.container_port = kFetchMetricsPort;
  fetch.ports = {progress};
  add_store_access(spec.sources, fetch);
  fetch.resources = resources;
  fetch.security_context = tool_security_context();
  // A fetch that fails before writing its results still leaves its last log lines (the error).
  fetch.termination_message_policy = "FallbackToLogsOnError";
  fetch.volume_mounts = {volume_mount(kCacheVolume, kSourceCacheDir, std::nullopt),
                         volume_mount(kLinksVolume, kSourcesDir, std::nullopt),
                         volume_mount(kTmpVolume, "/tmp", std::nullopt)};
  if (!restore.empty())
    fetch.volume_mounts.push_back(
        volume_mount(kCheckpointStagingVolume, kCheckpointStagingDir, std::nullopt));
  pod.init_containers.push_back(fetch);
  pod.volumes.push_back(cache_volume(spec.sources));
  pod.volumes.push_back(empty_dir(kLinksVolume));
  pod.volumes.push_back(empty_dir(kTmpVolume));
  trainer.volume_mounts.push_back(volume_mount(kCacheVolume, kSourceCacheDir, true));
  trainer.volume_mounts.push_back(volume_mount(kLinksVolume, kSourcesDir, true));
}

}  // namespace kubetune::op
