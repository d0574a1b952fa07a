// A FineTuneJob read from the API server (or a manifest file), defaulted and validated with the
// same rules as the CRD, and split into the trainer's config and the operator's settings.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/train_config.h"

namespace kubetune::op {

// Every problem of a manifest, one per line, each starting with the field's path.
class SpecError : public std::runtime_error {
 public:
  explicit SpecError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

struct Volume {
  std::string name;
  std::string mount_path;
  bool read_only = false;
  std::string claim_name;  // persistentVolumeClaim, or
  std::string host_path;   // hostPath
  std::string host_path_type;
};

struct Workers {
  int replicas = 1;
  int gpus = 1;                          // per pod; 0 = CPU
  std::optional<double> gpu_memory_gib;  // one GPU's memory, for the preflight's fit check
  std::string image;
  std::string pull_policy;
  nlohmann::json cpu, memory, shm_size;  // quantities or null
  nlohmann::json node_selector = nlohmann::json::object();
  nlohmann::json tolerations = nlohmann::json::array();
  nlohmann::json env = nlohmann::json::array();
  std::string priority_class;
  std::string service_account;
  // workers.securityContext (defaults as in the CRD)
  bool run_as_non_root = true;
  std::optional<int64_t> run_as_user, run_as_group, fs_group = 65532;
  std::vector<std::string> add_capabilities;
};

struct RunPolicy {
  int backoff_limit = 3;
  std::optional<long> active_deadline_seconds;
  std::optional<long> ttl_seconds_after_finished;
  bool suspend = false;
  bool preflight = true;                        // a CPU pod checks data and memory first
  long stall_timeout_seconds = 1800;            // 0: no stall watchdog
  long termination_grace_period_seconds = 600;  // SIGTERM -> SIGKILL of a worker pod
};

struct FineTuneJob {
  std::string name;
  std::string ns;
  std::string uid;
  long generation = 0;
  nlohmann::json spec;          // defaulted
  nlohmann::json train_config;  // the trainer's part of spec, defaulted by its own validator
  TrainConfig config;           // the same, typed
  Workers workers;
  RunPolicy run_policy;
  std::vector<Volume> volumes;
};

// Defaults and validates a whole FineTuneJob object; throws SpecError listing every problem.
FineTuneJob parse_job(const nlohmann::json& object);

// The same checks without parsing: an empty list means valid. `object` gets its defaults.
std::vector<std::string> validate_job(nlohmann::json& object);

}  // namespace kubetune::op
