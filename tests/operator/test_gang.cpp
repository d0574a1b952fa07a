// Exit-code and pod-state classification of the gang policy.
#include <gtest/gtest.h>

#include "common/contracts.h"
#include "operator/policy/gang.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

json pod_json(int rank, const std::string& phase) {
  return {{"metadata",
           {{"name", "j-worker-" + std::to_string(rank)},
            {"labels", {{kLabelRank, std::to_string(rank)}}}}},
          {"status", {{"phase", phase}}}};
}

json terminated_json(int rank, int code, const std::string& reason = "") {
  json p = pod_json(rank, "Failed");
  p["status"]["containerStatuses"] = {
      {{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", code}, {"reason", reason}}}}}}};
  return p;
}

// The same pods typed, as the reconciler reads them from the informer's JSON.
k8s::Pod pod(int rank, const std::string& phase) { return pod_json(rank, phase).get<k8s::Pod>(); }
k8s::Pod terminated(int rank, int code, const std::string& reason = "") {
  return terminated_json(rank, code, reason).get<k8s::Pod>();
}

TEST(Gang, AllRunningAndAllSucceeded) {
  EXPECT_TRUE(assess_gang({pod(0, "Running"), pod(1, "Running")}, 2).all_running());
  EXPECT_TRUE(assess_gang({pod(0, "Succeeded"), pod(1, "Succeeded")}, 2).all_succeeded());
  const GangState g = assess_gang({pod(1, "Pending")}, 2);
  EXPECT_EQ(g.missing, std::vector<int>{0});
  EXPECT_EQ(g.pending, 1);
  EXPECT_FALSE(g.failure);
}

TEST(Gang, ExitCodeTwoIsPermanent) {
  const GangState g = assess_gang({pod(0, "Running"), terminated(1, 2, "Error")}, 2);
  ASSERT_TRUE(g.failure);
  EXPECT_TRUE(g.failure->permanent);
  EXPECT_EQ(g.failure->reason, Reason::kConfigError);
  EXPECT_EQ(g.failure->rank, 1);
}

TEST(Gang, OtherExitCodesSignalsAndEvictionsAreRetryable) {
  for (int code : {1, 137, 139}) {
    auto f = pod_failure(terminated(0, code), 0);
    ASSERT_TRUE(f);
    EXPECT_FALSE(f->permanent) << code;
  }
  auto oom = pod_failure(terminated(0, 2, "OOMKilled"), 0);
  EXPECT_FALSE(oom->permanent);
  EXPECT_EQ(oom->reason, Reason::kOOMKilled);
  json evicted = pod_json(0, "Failed");
  evicted["status"]["reason"] = "Evicted";
  EXPECT_EQ(pod_failure(evicted.get<k8s::Pod>(), 0)->reason, Reason::kEvicted);
  EXPECT_EQ(pod_failure(pod(0, "Unknown"), 0)->reason, Reason::kNodeLost);
  json deleting = pod_json(0, "Running");
  deleting["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z";
  EXPECT_EQ(pod_failure(deleting.get<k8s::Pod>(), 0)->reason, Reason::kWorkerDeleted);
}

TEST(Gang, PermanentFailureWinsOverRetryable) {
  const GangState g = assess_gang({terminated(0, 1), terminated(1, 2)}, 2);
  ASSERT_TRUE(g.failure);
  EXPECT_TRUE(g.failure->permanent);
}

}  // namespace
}  // namespace kubetune::op
