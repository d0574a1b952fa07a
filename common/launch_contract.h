// The launch contract, written once: where one node (pod) of a job stands, in torchrun's words.
// The operator's pods and `kubetune run` write it as environment (to_environment);
// `kubetune-trainer launch` reads it (from_environment, its flags override) and starts the node's
// processes, each with the same variables plus its own rank (process_environment), which
// parallel::DistEnv reads. So NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR and MASTER_PORT are
// spelled here only.
#pragma once

#include <map>
#include <string>

namespace kubetune {

// Where rank 0 listens for the rendezvous (the pods' container port and headless Service port).
inline constexpr int kRendezvousPort = 29500;

namespace launch_env {
inline constexpr const char* kNnodes = "NNODES";
inline constexpr const char* kNodeRank = "NODE_RANK";
inline constexpr const char* kGroupRank = "GROUP_RANK";  // torchrun's other name for NODE_RANK
inline constexpr const char* kNprocPerNode = "NPROC_PER_NODE";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
// Per process (written by launch, read by parallel::DistEnv).
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
}  // namespace launch_env

struct LaunchContract {
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 0;  // 0 = auto: one per visible GPU, else 1
  std::string master_addr = "127.0.0.1";
  int master_port = kRendezvousPort;

  // NNODES, NODE_RANK, NPROC_PER_NODE (absent for auto), MASTER_ADDR, MASTER_PORT.
  std::map<std::string, std::string> to_environment() const;
  // The same read back; absent variables keep the defaults. Throws naming a malformed variable
  // or a node rank outside [0, nnodes).
  static LaunchContract from_environment();
  // What process `local_rank` of this node (of `local_world` processes) gets: the contract, its
  // ranks, the world size, and GROUP_RANK for torchrun's readers.
  std::map<std::string, std::string> process_environment(int local_rank, int local_world) const;
};

// An integer environment variable, or `fallback` when unset or empty; throws naming it when it is
// not an integer.
int int_from_environment(const char* name, int fallback);

}  // namespace kubetune
