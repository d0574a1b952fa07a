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

// Rank 0's pod with its publish container (render/publish.h) in `publish_state`.
k8s::Pod with_publish(const std::string& phase, const json& trainer_state,
                      const json& publish_state) {
  json p = pod_json(0, phase);
  p["status"]["containerStatuses"] = {{{"name", "trainer"}, {"state", trainer_state}},
                                      {{"name", "publish"}, {"state", publish_state}}};
  return p.get<k8s::Pod>();
}

json ended(int code, const std::string& message = "") {
  return {{"terminated", {{"exitCode", code}, {"message", message}}}};
}

// The pod cache keeps a pod's metadata, status and node; a gang reads the same from it.
TEST(Gang, TheCachedFormOfAPodReadsAsThePod) {
  const json spec = {{"nodeName", "gpu-3"},
                     {"containers", {{{"name", "trainer"}, {"image", "kubetune/trainer"}}}},
                     {"volumes", {{{"name", "work"}, {"emptyDir", json::object()}}}}};
  std::vector<json> full = {pod_json(0, "Running"), terminated_json(1, 137, "OOMKilled")};
  for (auto& p : full) p["spec"] = spec;
  full[0]["status"]["podIP"] = "10.0.0.7";
  std::vector<k8s::Pod> as_served, as_cached;
  for (const auto& p : full) {
    json cached = p;
    keep_what_is_read(cached);
    EXPECT_EQ(cached["spec"], (json{{"nodeName", "gpu-3"}, {"containers", json::array()}}));
    EXPECT_EQ(cached["metadata"], p["metadata"]);
    EXPECT_EQ(cached["status"], p["status"]);
    as_served.push_back(p.get<k8s::Pod>());
    as_cached.push_back(cached.get<k8s::Pod>());
  }
  const GangState a = assess_gang(as_served, 2), b = assess_gang(as_cached, 2);
  EXPECT_EQ(a.placement.bound, 1);
  EXPECT_EQ(b.placement.bound, a.placement.bound);
  EXPECT_EQ(b.running, a.running);
  ASSERT_TRUE(a.failure && b.failure);
  EXPECT_EQ(b.failure->message, a.failure->message);
  EXPECT_EQ(b.failure->permanent, a.failure->permanent);
}

TEST(Gang, ATrainerThatFailsBesideAWaitingPublisherHasFailed) {
  const json waiting = {{"running", json::object()}};
  auto f = pod_failure(with_publish("Running", ended(3), waiting), 0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, Reason::kWorkerFailed);
  EXPECT_FALSE(f->permanent);
  EXPECT_FALSE(pod_failure(with_publish("Running", ended(0), waiting), 0));  // it publishes
  // ... and its step stops: the stall watchdog must not take the upload for a hang.
  EXPECT_TRUE(trainer_succeeded(with_publish("Running", ended(0), waiting)));
  EXPECT_FALSE(trainer_succeeded(with_publish("Running", ended(3), waiting)));
  EXPECT_FALSE(trainer_succeeded(with_publish("Running", waiting, waiting)));
  EXPECT_FALSE(pod_failure(with_publish("Running", json{{"running", json::object()}}, waiting), 0));
}

TEST(Gang, APublishThatFailsAfterTheTrainerIsPublishFailed) {
  auto denied = pod_failure(
      with_publish("Failed", ended(0), ended(2, "s3://b/p: bucket b: access denied (403)")), 0);
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->reason, Reason::kPublishFailed);
  EXPECT_TRUE(denied->permanent);
  EXPECT_NE(denied->message.find("bucket b: access denied"), std::string::npos) << denied->message;
  EXPECT_NE(denied->message.find("publishing"), std::string::npos) << denied->message;
  auto network = pod_failure(with_publish("Failed", ended(0), ended(3, "timed out")), 0);
  ASSERT_TRUE(network);
  EXPECT_EQ(network->reason, Reason::kPublishFailed);
  EXPECT_FALSE(network->permanent);
  const json no_secret = {
      {"waiting",
       {{"reason", "CreateContainerConfigError"}, {"message", "secret \"s3-creds\" not found"}}}};
  auto missing =
      pod_failure(with_publish("Running", json{{"running", json::object()}}, no_secret), 0);
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->reason, Reason::kPublishFailed);
  EXPECT_TRUE(missing->permanent);
  EXPECT_NE(missing->message.find("s3-creds"), std::string::npos) << missing->message;
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
