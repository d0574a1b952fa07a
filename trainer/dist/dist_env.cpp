#include "trainer/dist/dist_env.h"

#include <cstdlib>
#include <stdexcept>

namespace kubetune::dist {
namespace {

int int_from_env(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  try {
    size_t used = 0;
    int parsed = std::stoi(value, &used);
    if (used == std::string(value).size()) return parsed;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(std::string("environment variable ") + name + "='" + value +
                           "' is not an integer");
}

}  // namespace

DistEnv DistEnv::from_environment() {
  DistEnv e;
  e.world_size = int_from_env("WORLD_SIZE", 1);
  e.rank = int_from_env("RANK", 0);
  e.local_rank = int_from_env("LOCAL_RANK", e.rank);
  e.local_world_size = int_from_env("LOCAL_WORLD_SIZE", e.world_size);
  e.node_rank = int_from_env("NODE_RANK", int_from_env("GROUP_RANK", 0));
  e.nnodes = int_from_env("NNODES", e.world_size / std::max(1, e.local_world_size));
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) e.master_addr = addr;
  e.master_port = int_from_env("MASTER_PORT", 29500);
  if (e.world_size < 1) throw std::runtime_error("WORLD_SIZE must be >= 1");
  if (e.rank < 0 || e.rank >= e.world_size)
    throw std::runtime_error("RANK=" + std::to_string(e.rank) +
                             " is outside WORLD_SIZE=" + std::to_string(e.world_size));
  return e;
}

}  // namespace kubetune::dist
