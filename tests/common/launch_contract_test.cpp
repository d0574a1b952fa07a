// The launch contract: what the operator's pods and `kubetune run` write is what
// `kubetune-trainer launch` reads, and each process's environment is torchrun's.
#include "common/launch_contract.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace kubetune {
namespace {

// Sets the variables for the test's duration, and clears every contract variable around it.
using Variables = std::map<std::string, std::string>;

class Environment {
 public:
  explicit Environment(const Variables& vars) {
    clear();
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  }
  ~Environment() { clear(); }

 private:
  static void clear() {
    for (const char* name :
         {launch_env::kNnodes, launch_env::kNodeRank, launch_env::kGroupRank,
          launch_env::kNprocPerNode, launch_env::kMasterAddr, launch_env::kMasterPort}) {
      unsetenv(name);
    }
  }
};

TEST(LaunchContract, WhatThePodsWriteIsWhatLaunchReads) {
  LaunchContract written;
  written.nnodes = 3;
  written.node_rank = 2;
  written.nproc_per_node = 8;
  written.master_addr = "job-worker-0.job.team-a.svc";
  written.master_port = 29500;
  Environment env(written.to_environment());
  const LaunchContract read = LaunchContract::from_environment();
  EXPECT_EQ(read.nnodes, 3);
  EXPECT_EQ(read.node_rank, 2);
  EXPECT_EQ(read.nproc_per_node, 8);
  EXPECT_EQ(read.master_addr, "job-worker-0.job.team-a.svc");
  EXPECT_EQ(read.master_port, 29500);
}

TEST(LaunchContract, AutoProcessesAndDefaultsWithoutVariables) {
  Environment env(Variables{});
  const LaunchContract c = LaunchContract::from_environment();
  EXPECT_EQ(c.nnodes, 1);
  EXPECT_EQ(c.node_rank, 0);
  EXPECT_EQ(c.nproc_per_node, 0);  // auto
  EXPECT_EQ(c.master_addr, "127.0.0.1");
  EXPECT_EQ(c.master_port, kRendezvousPort);
  EXPECT_EQ(c.to_environment().count(launch_env::kNprocPerNode), 0u) << "auto is no number";
}

TEST(LaunchContract, MalformedOrOutOfRangeValuesAreNamed) {
  {
    Environment env(Variables{{"NNODES", "two"}});
    try {
      LaunchContract::from_environment();
      FAIL() << "accepted NNODES=two";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("NNODES='two' is not an integer"), std::string::npos);
    }
  }
  Environment env(Variables{{"NNODES", "2"}, {"NODE_RANK", "2"}});
  try {
    LaunchContract::from_environment();
    FAIL() << "accepted NODE_RANK=2 of 2";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NODE_RANK=2 is outside [0, NNODES=2)"),
              std::string::npos);
  }
}

TEST(LaunchContract, EachProcessGetsTorchrunsRanks) {
  LaunchContract c;
  c.nnodes = 2;
  c.node_rank = 1;
  auto env = c.process_environment(/*local_rank=*/3, /*local_world=*/4);
  EXPECT_EQ(env.at("RANK"), "7");
  EXPECT_EQ(env.at("LOCAL_RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "8");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("NODE_RANK"), "1");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("NNODES"), "2");
  EXPECT_EQ(env.at("NPROC_PER_NODE"), "4");
}

}  // namespace
}  // namespace kubetune
