#include "trainer/parallel/dist_env.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include "common/launch_contract.h"

namespace kubetune::parallel {

DistEnv DistEnv::from_environment() {
  namespace env = launch_env;
  DistEnv e;
  e.world_size = int_from_environment(env::kWorldSize, 1);
  e.rank = int_from_environment(env::kRank, 0);
  e.local_rank = int_from_environment(env::kLocalRank, e.rank);
  e.local_world_size = int_from_environment(env::kLocalWorldSize, e.world_size);
  e.node_rank = int_from_environment(env::kNodeRank, int_from_environment(env::kGroupRank, 0));
  e.nnodes = int_from_environment(env::kNnodes, e.world_size / std::max(1, e.local_world_size));
  if (const char* addr = std::getenv(env::kMasterAddr); addr && *addr) e.master_addr = addr;
  e.master_port = int_from_environment(env::kMasterPort, kRendezvousPort);
  if (e.world_size < 1) throw std::runtime_error("WORLD_SIZE must be >= 1");
  if (e.rank < 0 || e.rank >= e.world_size)
    throw std::runtime_error("RANK=" + std::to_string(e.rank) +
                             " is outside WORLD_SIZE=" + std::to_string(e.world_size));
  return e;
}

}  // namespace kubetune::parallel
