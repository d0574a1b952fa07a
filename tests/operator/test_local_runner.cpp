// `kubetune run`: the job's pods as local processes, with the operator's gang policy. A shell
// script stands in for kubetune-trainer (KUBETUNE_TRAINER).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/train_config.h"
#include "common/yaml_file.h"
#include "local_run.h"
#include "operator/render/yaml_emit.h"
#include "test_support.h"

namespace kubetune::op {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using testing::RunResult;

class LocalRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("kubetune-local-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir / "state");
  }
  void TearDown() override { fs::remove_all(dir); }

  RunResult run(const std::string& mode, const std::function<void(json&)>& mutate = {}) {
    return testing::run_local_job(dir, mode, mutate, extra_env);
  }
  std::string attempts(int rank) {
    std::ifstream in(dir / "state" / ("attempts-" + std::to_string(rank)));
    std::string all, line;
    while (std::getline(in, line)) all += line;
    return all;
  }

  fs::path dir;
  std::string extra_env;  // VAR=value ... for `kubetune run` itself
};

TEST_F(LocalRunnerTest, RunsOneProcessPerPodWithThePodsEnvironment) {
  const RunResult r = run("succeed");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("[worker-0] rank 0 attempt 0 args: launch -- train --config "),
            std::string::npos)
      << r.output;
  // The pod's launch contract with this machine's address: the environment, as in the pod.
  EXPECT_NE(r.output.find("[worker-0] MASTER_ADDR=127.0.0.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NNODES=2 NODE_RANK=0 NPROC_PER_NODE=1 POD_NAME=tiny-lora-cpu-worker-0"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[worker-1] rank 1 attempt 0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[worker-1] MASTER_ADDR=127.0.0.1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("POD_NAME=tiny-lora-cpu-worker-1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("succeeded"), std::string::npos);
  EXPECT_EQ(attempts(0), "0");
  EXPECT_EQ(attempts(1), "0");
}

TEST_F(LocalRunnerTest, PreflightRunsFirstAndItsSummaryIsPrinted) {
  const RunResult r = run("succeed");
  EXPECT_NE(r.output.find("[kubetune] preflight: 12 steps, 24 records, 480 tokens, est. 0.5 GiB "
                          "per GPU: OK"),
            std::string::npos)
      << r.output;
  EXPECT_LT(r.output.find("preflight:"), r.output.find("[worker-0]")) << r.output;
}

TEST_F(LocalRunnerTest, FailedPreflightStartsNoWorker) {
  extra_env = "FAKE_PREFLIGHT=DatasetInvalid";
  const RunResult r = run("succeed");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(attempts(0), "");  // no worker ever started
  EXPECT_NE(r.output.find("DatasetInvalid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("failed before starting: preflight exited 2"), std::string::npos)
      << r.output;
}

TEST_F(LocalRunnerTest, FailedWorkerRestartsTheWholeGang) {
  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run("fail-once");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(attempts(0), "01");  // the healthy worker was stopped and restarted with its peer
  EXPECT_EQ(attempts(1), "01");
  EXPECT_NE(r.output.find("worker 1 exited with code 3; restarting all workers (restart 1 of"),
            std::string::npos)
      << r.output;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));  // no 30 s sleep
}

TEST_F(LocalRunnerTest, ConfigurationErrorIsNotRetried) {
  const RunResult r = run("config-error");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(attempts(0), "0");
  EXPECT_NE(r.output.find("configuration or data error"), std::string::npos) << r.output;
}

TEST_F(LocalRunnerTest, BackoffLimitEndsTheRun) {
  const RunResult r = run("always-fail");
  EXPECT_EQ(r.code, 1) << r.output;
  // The first gang and backoffLimit=2 restarts, no more.
  EXPECT_NE(r.output.find("of tiny-lora-cpu (gang 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("of tiny-lora-cpu (gang 3)"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("failed (BackoffLimitExceeded): the gang failed 3 times (backoffLimit 2)"),
      std::string::npos)
      << r.output;
}

TEST_F(LocalRunnerTest, DeadlineStopsAHangingGang) {
  const RunResult r =
      run("hang", [](json& j) { j["spec"]["runPolicy"]["activeDeadlineSeconds"] = 1; });
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("activeDeadlineSeconds=1 exceeded"), std::string::npos) << r.output;
}

TEST_F(LocalRunnerTest, InvalidManifestIsRejectedBeforeStarting) {
  const RunResult r = run("succeed", [](json& j) { j["spec"]["workers"]["replicas"] = 0; });
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("spec.workers.replicas: must be >= 1"), std::string::npos) << r.output;
  EXPECT_EQ(attempts(0), "");
}

// The CLI reads manifests as the API server would: without apiVersion or kind, it refuses them.
TEST_F(LocalRunnerTest, ManifestWithoutApiVersionOrKindIsRefused) {
  const RunResult r = run("succeed", [](json& job) { job.erase("apiVersion"); });
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("apiVersion: required field is missing"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kubetune::op
