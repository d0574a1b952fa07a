#include "common/launch_contract.h"

#include <cstdlib>
#include <stdexcept>

namespace kubetune {

int int_from_environment(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  try {
    size_t used = 0;
    const int parsed = std::stoi(value, &used);
    if (used == std::string(value).size()) return parsed;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(std::string("environment variable ") + name + "='" + value +
                           "' is not an integer");
}

std::map<std::string, std::string> LaunchContract::to_environment() const {
  std::map<std::string, std::string> env = {
      {launch_env::kNnodes, std::to_string(nnodes)},
      {launch_env::kNodeRank, std::to_string(node_rank)},
      {launch_env::kMasterAddr, master_addr},
      {launch_env::kMasterPort, std::to_string(master_port)},
  };
  if (nproc_per_node > 0) env[launch_env::kNprocPerNode] = std::to_string(nproc_per_node);
  return env;
}

LaunchContract LaunchContract::from_environment() {
  LaunchContract c;
  c.nnodes = int_from_environment(launch_env::kNnodes, c.nnodes);
  c.node_rank = int_from_environment(launch_env::kNodeRank,
                                     int_from_environment(launch_env::kGroupRank, c.node_rank));
  c.nproc_per_node = int_from_environment(launch_env::kNprocPerNode, c.nproc_per_node);
  if (const char* addr = std::getenv(launch_env::kMasterAddr); addr && *addr) c.master_addr = addr;
  c.master_port = int_from_environment(launch_env::kMasterPort, c.master_port);
  if (c.nnodes < 1) throw std::runtime_error(std::string(launch_env::kNnodes) + " must be >= 1");
  if (c.node_rank < 0 || c.node_rank >= c.nnodes) {
    throw std::runtime_error(std::string(launch_env::kNodeRank) + "=" +
                             std::to_string(c.node_rank) + " is outside [0, " +
                             launch_env::kNnodes + "=" + std::to_string(c.nnodes) + ")");
  }
  return c;
}

std::map<std::string, std::string> LaunchContract::process_environment(int local_rank,
                                                                       int local_world) const {
  std::map<std::string, std::string> env = to_environment();
  env[launch_env::kNprocPerNode] = std::to_string(local_world);
  env[launch_env::kGroupRank] = std::to_string(node_rank);
  env[launch_env::kRank] = std::to_string(node_rank * local_world + local_rank);
  env[launch_env::kLocalRank] = std::to_string(local_rank);
  env[launch_env::kWorldSize] = std::to_string(nnodes * local_world);
  env[launch_env::kLocalWorldSize] = std::to_string(local_world);
  return env;
}

}  // namespace kubetune
