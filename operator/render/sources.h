// hf:// and s3:// sources in a job's pods (fetch/README.md). Every pod of a job with one gets an
// init container, `fetch`, that runs kubetune-fetch: it fetches each source into the cache
// (spec.sources.cacheClaim, else an emptyDir of the pod) and links it at a fixed path under
// kSourcesDir, which the trainer's config names instead of the source. The preflight pod's fetch
// resolves the revisions (a branch to its commit); the workers' fetch is pinned to them
// (status.sources), so every rank reads the same files, and with a shared cache reads them
// without downloading.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/finetunejob_types.h"
#include "operator/kube/kube_types.h"

namespace kubetune::op {

inline constexpr const char* kFetchContainer = "fetch";
inline constexpr const char* kSourcesDir = "/kubetune/sources";  // the links (an emptyDir)
inline constexpr const char* kSourceCacheDir = "/kubetune/cache";
// Where the fetch container serves its progress (common/metrics/fetch_series.h) for the operator
// (policy/progress.h reads it); its end and report are read by policy/fetch_end.h.
inline constexpr int kFetchMetricsPort = 9401;

struct RemoteSource {
  std::string name;    // the link's file name: model, train, validation
  std::string source;  // as written in the spec
};

// The remote sources of a training config, in the order model, train, validation.
std::vector<RemoteSource> remote_sources(const api::TrainConfig& config);

// The trainer's config with each remote source replaced by its link under `links_dir`.
nlohmann::json with_linked_sources(nlohmann::json train_config, const std::string& links_dir);

// kubetune-fetch's arguments: NAME=SOURCE for each source, --pin SOURCE=REVISION for each pin.
std::vector<std::string> fetch_arguments(const std::vector<RemoteSource>& sources,
                                         const std::vector<api::FetchedSource>& pins,
                                         const std::string& cache_dir,
                                         const std::string& links_dir);

// What kubetune-fetch's containers (fetch, publish) get to reach the stores: HOME, the endpoints
// and the credentials Secret (spec.sources), which no other container gets.
void add_store_access(const api::Sources& sources, k8s::Container& tool);
// Their security context: no capabilities whatever the trainer was given, a read-only root (an
// emptyDir for /tmp).
k8s::SecurityContext tool_security_context();

// Adds the fetch init container, the cache and links volumes, and their mounts in `trainer`, to
// a pod spec of a job that has remote sources (nothing otherwise). The container gets the
// trainer's CPU and memory and no GPU (`resources`), and a security context of its own: no
// capabilities whatever the trainer was given, a read-only root with an emptyDir for /tmp.
// With `restores`, it also puts the newest checkpoint of an s3:// checkpoint.dir where the trainer
// looks for it (render/publish.h), and is added for that alone.
void add_fetch_container(const api::FineTuneJobSpec& spec,
                         const std::vector<api::FetchedSource>& pins, k8s::PodSpec& pod,
                         k8s::Container& trainer, const k8s::ResourceRequirements& resources,
                         bool restores);

}  // namespace kubetune::op
