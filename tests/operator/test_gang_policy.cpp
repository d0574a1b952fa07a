// One gang policy (operator/policy/gang_policy.h), two runners: for the same worker outcome the
// operator (pods on the fake API server) and `kubetune run` (processes, fake_trainer.sh) take the
// same decision with the same reason: restart the gang, or fail the job.
#include <gtest/gtest.h>

#include "local_run.h"
#include "operator/policy/gang_policy.h"
#include "operator_fixture.h"

namespace kubetune::op::testing {
namespace {

namespace fs = std::filesystem;

struct Row {
  const char* end;     // worker 1's end: an exit code, or signal9
  int code;            // as the kubelet reports it (128 + signal)
  const char* reason;  // the decision's reason
  bool restart;        // with backoffLimit 1
};

const Row kRows[] = {
    {"1", 1, "WorkerFailed", true},
    {"2", 2, "ConfigError", false},  // configuration or data error: never retried
    {"3", 3, "WorkerFailed", true},  // the trainer's retryable exit (collective timeout, SIGTERM)
    {"signal9", 137, "WorkerFailed", true},
};

TEST(GangPolicy, DecisionsAndMessages) {
  const WorkerFailure config = exited(1, "worker 1", 2, "", "bad line 7");
  EXPECT_TRUE(config.permanent);
  EXPECT_EQ(config.message,
            "worker 1 exited with code 2: configuration or data error, not "
            "retried: bad line 7");
  EXPECT_FALSE(exited(1, "worker 1", 2, "OOMKilled", "").permanent) << "the kernel's kill";
  EXPECT_EQ(exited(1, "worker 1", 137, "OOMKilled", "").reason, Reason::kOOMKilled);
  const GangDecision restart = next(exited(0, "worker 0", 3, "", ""), 0, 1);
  EXPECT_TRUE(restart.restart);
  EXPECT_EQ(restart.message,
            "worker 0 exited with code 3; restarting all workers (restart 1 of "
            "1), resuming from the last checkpoint");
  const GangDecision out = next(exited(0, "worker 0", 3, "", ""), 1, 1);
  EXPECT_FALSE(out.restart);
  EXPECT_EQ(out.reason, Reason::kBackoffLimitExceeded);
  EXPECT_EQ(stalled_failure(60, 12).message,
            "rank 0 has not finished a step for 60 s (runPolicy.stallTimeoutSeconds; last seen: "
            "step 12)");
}

class BothRunnersTest : public OperatorTest {};

TEST_F(BothRunnersTest, SameOutcomeSameDecision) {
  start_operator();
  int n = 0;
  for (const Row& row : kRows) {
    SCOPED_TRACE(row.end);
    // The operator: worker 1's pod ends with the code.
    const std::string name = "policy-" + std::to_string(n++);
    create_job(name, [](json& j) { j["spec"]["runPolicy"]["backoffLimit"] = 1; });
    ASSERT_TRUE(wait_pods(name, 2, "0"));
    run_all(name, 2);
    ASSERT_TRUE(wait_phase(name, "Running"));
    exit_pod(name + "-worker-1", row.code);
    const char* condition_type = row.restart ? "Restarting" : "Failed";
    ASSERT_TRUE(eventually([&] { return condition(name, condition_type)["status"] == "True"; }));
    const json c = condition(name, condition_type);
    EXPECT_EQ(c["reason"], row.reason);

    // kubetune run: worker 1's process ends the same way.
    const fs::path dir =
        fs::temp_directory_path() / ("kubetune-policy-" + std::to_string(::getpid()) + "-" + name);
    fs::remove_all(dir);
    const RunResult r = run_local_job(dir, "end-first", [&](json& j) {
      j["spec"]["runPolicy"] = {{"backoffLimit", 1}};
      j["spec"]["workers"]["env"].push_back({{"name", "FAKE_END"}, {"value", row.end}});
    });
    fs::remove_all(dir);
    if (row.restart) {
      EXPECT_EQ(r.code, 0) << r.output;
      EXPECT_NE(r.output.find(std::string("[kubetune] ") + row.reason +
                              ": worker 1 exited with code " + std::to_string(row.code)),
                std::string::npos)
          << r.output;
      EXPECT_NE(r.output.find("restarting all workers (restart 1 of 1)"), std::string::npos)
          << r.output;
    } else {
      EXPECT_EQ(r.code, 2) << r.output;
      EXPECT_NE(r.output.find(std::string("failed (") + row.reason +
                              "): worker 1 exited with code " + std::to_string(row.code)),
                std::string::npos)
          << r.output;
    }
    // The operator's message says the same of its pod.
    const std::string message = c["message"];
    EXPECT_NE(message.find("exited with code " + std::to_string(row.code)), std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace kubetune::op::testing
