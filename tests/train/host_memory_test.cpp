// The host-memory check of offloaded checkpoints (trainer/plan/host_memory.h): the bytes they pin,
// the kernel's texts read as the kernel writes them, and the error that names what to change.
#include "trainer/plan/host_memory.h"

#include <gtest/gtest.h>

namespace kubetune::train {
namespace {

model::ModelConfig llama_8b_layout() {
  model::ModelConfig m;
  m.hidden_size = 4096;
  m.num_hidden_layers = 32;
  return m;
}

TEST(HostMemory, OffloadedCheckpointsPinAllLayerInputsButTheLast) {
  TrainConfig c;
  c.data.max_length = 393216;
  c.training.micro_batch_size = 1;
  EXPECT_EQ(offloaded_recompute_input_bytes(llama_8b_layout(), c), 0);  // not offloading
  c.model.offload_checkpoints = true;
  c.model.gradient_checkpointing = true;
  // Session 18's longest run: 31 bf16 inputs of 393216 x 4096, 100 GB.
  EXPECT_EQ(offloaded_recompute_input_bytes(llama_8b_layout(), c), 31LL * 393216 * 4096 * 2);
  c.method.type = api::MethodType::kFull;  // fp32 weights: fp32 layer inputs
  EXPECT_EQ(offloaded_recompute_input_bytes(llama_8b_layout(), c), 31LL * 393216 * 4096 * 4);
}

TEST(HostMemory, ReadsMeminfoAndTheCgroupLimit) {
  EXPECT_EQ(meminfo_available_bytes("MemTotal:       131072000 kB\n"
                                    "MemFree:         1000 kB\n"
                                    "MemAvailable:   120000000 kB\n"),
            120000000LL * 1024);
  EXPECT_FALSE(meminfo_available_bytes("MemTotal: 1 kB\n"));
  EXPECT_EQ(cgroup_room_bytes("68719476736\n", "1073741824\n"),
            63LL << 30);                                     // 64 GiB limit, 1 used
  EXPECT_FALSE(cgroup_room_bytes("max\n", "1073741824\n"));  // no limit
  EXPECT_EQ(cgroup_room_bytes("1000\n", "2000\n"), 0);
  EXPECT_FALSE(cgroup_room_bytes("", ""));
  // This machine's answer is one of them, or nothing: never negative.
  if (auto available = available_host_memory()) {
    EXPECT_GE(*available, 0);
  }
}

TEST(HostMemory, TooLittleNamesTheFieldsToChange) {
  EXPECT_FALSE(offload_host_memory_error(10LL << 30, 2, 20LL << 30));
  const auto error = offload_host_memory_error(100LL << 30, 2, 120LL << 30);
  ASSERT_TRUE(error);
  for (const char* part :
       {"model.offloadCheckpoints", "100.0 GiB", "2 on this machine", "200.0 GiB", "120.0 GiB",
        "data.maxLength", "training.microBatchSize", "workers.resources.memory"})
    EXPECT_NE(error->find(part), std::string::npos) << part << " in " << *error;
}

}  // namespace
}  // namespace kubetune::train
