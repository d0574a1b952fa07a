// What the components agree on, written once: the trainer's exit statuses (read by the operator
// and the local runner), default paths, and the names and labels of the FineTuneJob API and of the
// objects the operator creates (read by the chart's monitors and the dashboards too).
#pragma once

#include <cstddef>
#include <string>

namespace kubetune {

// Exit statuses of kubetune-trainer.
// A problem in the user's config or data: retrying cannot help, the job fails at once.
inline constexpr int kExitUserError = 2;
// A collective timed out or a peer died: the gang is restarted from the last checkpoint.
inline constexpr int kExitRetryable = 3;

// Kubernetes keeps at most this many bytes of a container's termination message; the preflight
// pod's report has to fit.
inline constexpr size_t kTerminationMessageBytes = 4096;

// Where checkpoints go unless checkpoint.dir says otherwise.
inline std::string default_checkpoint_dir(const std::string& output_dir) {
  return output_dir + "/checkpoints";
}

// Written last into a finished run's output folder by rank 0's trainer (its host and step), and
// last under an s3:// output.dir by kubetune-fetch publish (with every file's size and SHA-256):
// a folder or prefix without it is not whole. fetch/kubetune_fetch/upload.py's COMPLETE_FILE.
inline constexpr const char* kOutputCompleteFile = "kubetune-complete.json";

}  // namespace kubetune

namespace kubetune::op {

inline constexpr const char* kGroup = "kubetune.io";
inline constexpr const char* kVersion = "v1alpha1";
inline constexpr const char* kApiVersion = "kubetune.io/v1alpha1";
inline constexpr const char* kKind = "FineTuneJob";
inline constexpr const char* kPlural = "finetunejobs";
inline constexpr const char* kShortName = "ftj";

// Labels on everything the operator creates; the pod informer selects on kLabelManagedBy.
inline constexpr const char* kLabelManagedBy = "app.kubernetes.io/managed-by";
inline constexpr const char* kManagerName = "kubetune-operator";
inline constexpr const char* kLabelJob = "kubetune.io/job-name";
inline constexpr const char* kLabelRank = "kubetune.io/rank";
// What a pod does: kRoleWorker (a rank of the gang) or kRolePreflight (the CPU check before it).
inline constexpr const char* kLabelRole = "kubetune.io/role";
inline constexpr const char* kRoleWorker = "worker";
inline constexpr const char* kRolePreflight = "preflight";
// Which gang a pod belongs to (= status.restarts when it was created): pods of an older gang are
// leftovers of a restart and are deleted before the new gang starts.
inline constexpr const char* kLabelAttempt = "kubetune.io/attempt";
// Which spec a pod was made from (a hash of the spec without runPolicy): a spec edited while the
// job was suspended makes the pods of the old spec leftovers, like those of an older gang.
inline constexpr const char* kAnnotationSpecHash = "kubetune.io/spec-hash";

inline constexpr const char* kTrainerContainer = "trainer";
// NVIDIA GPU feature discovery's node label: one GPU's memory in MiB.
inline constexpr const char* kNodeLabelGpuMemory = "nvidia.com/gpu.memory";
inline constexpr const char* kConfigMountDir = "/etc/kubetune";
inline constexpr const char* kConfigFile = "config.json";

}  // namespace kubetune::op
