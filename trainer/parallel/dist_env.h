// The torchrun environment: every process learns its place in the job from these variables
// (named in common/launch_contract.h), whether it was started by our launcher or by torchrun.
#pragma once

#include <string>

namespace kubetune::parallel {

struct DistEnv {
  int rank = 0, world_size = 1;              // RANK, WORLD_SIZE
  int local_rank = 0, local_world_size = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE
  int node_rank = 0, nnodes = 1;             // NODE_RANK (or GROUP_RANK), NNODES
  std::string master_addr = "127.0.0.1";     // MASTER_ADDR
  int master_port = 29500;                   // MASTER_PORT (kRendezvousPort)

  static DistEnv from_environment();  // throws naming the variable when one is malformed
  bool distributed() const { return world_size > 1; }
};

}  // namespace kubetune::parallel
