// The operator against the fake API server: real HTTP client, watches, queue and reconciler;
// the tests play the user and the kubelet.
#include <gtest/gtest.h>

#include "common/metrics/http_endpoint.h"
#include "common/metrics/scrape.h"
#include "common/metrics/spec_families.h"
#include "common/metrics/trainer_series.h"
#include "operator_fixture.h"

namespace kubetune::op::testing {
namespace {

TEST_F(OperatorTest, CreatesObjectsRunsAndSucceeds) {
  Manager& op = start_operator();
  create_job("happy");
  ASSERT_TRUE(wait_pods("happy", 2, "0"));
  ASSERT_TRUE(wait_phase("happy", "Created"));
  EXPECT_EQ(server->call("GET", "/api/v1/namespaces/default/configmaps/happy-config").code, 200);
  EXPECT_EQ(server->call("GET", "/api/v1/namespaces/default/services/happy").code, 200);
  EXPECT_EQ(condition("happy", "Created")["status"], "True");
  EXPECT_EQ(condition("happy", "Created")["observedGeneration"],
            job("happy")["metadata"]["generation"]);

  run_all("happy", 2);
  ASSERT_TRUE(wait_phase("happy", "Running"));
  EXPECT_EQ(condition("happy", "Running")["status"], "True");
  EXPECT_EQ(job("happy")["status"]["workers"]["active"], 2);

  exit_pod("happy-worker-0", 0);
  exit_pod("happy-worker-1", 0);
  ASSERT_TRUE(wait_phase("happy", "Succeeded"));
  const json st = job("happy")["status"];
  EXPECT_TRUE(st.contains("startTime"));
  EXPECT_TRUE(st.contains("completionTime"));
  EXPECT_EQ(st["restarts"], 0);
  EXPECT_EQ(st["workers"]["succeeded"], 2);
  EXPECT_EQ(condition("happy", "Succeeded")["status"], "True");
  EXPECT_EQ(condition("happy", "Running")["status"], "False");
  expect_status_matches_schema("happy");
  EXPECT_TRUE(eventually([&] {
    return has_event("happy", "GangCreated") && has_event("happy", "AllWorkersRunning") &&
           has_event("happy", "Completed");
  }));
  // Status only ever went through the status subresource.
  EXPECT_GT(server->request_count("PUT", jobs_path("happy") + "/status"), 0u);
  EXPECT_EQ(server->request_count("PUT", jobs_path("happy")),
            server->request_count("PUT", jobs_path("happy") + "/status"));
  // Operator metrics and probes.
  const std::string base = "http://127.0.0.1:" + std::to_string(op.http_port());
  const auto m = metrics::parse_text_format(metrics::http_get(base + "/metrics", 2000));
  EXPECT_GT(m.at("kubetune_operator_reconcile_total{result=\"success\"}"), 0);
  EXPECT_EQ(m.at("kubetune_operator_jobs{job=\"happy\",namespace=\"default\",phase=\"Succeeded\"}"),
            1);
  EXPECT_EQ(metrics::http_get(base + "/readyz", 2000), "ok");
  EXPECT_EQ(metrics::http_get(base + "/healthz", 2000), "ok");
}

TEST_F(OperatorTest, FailedWorkerRestartsTheWholeGang) {
  start_operator();
  create_job("gang");
  ASSERT_TRUE(wait_pods("gang", 2, "0"));
  const std::string uid0 = pods("gang")[0]["metadata"]["uid"];
  run_all("gang", 2);
  ASSERT_TRUE(wait_phase("gang", "Running"));

  exit_pod("gang-worker-1", 1);
  // Both pods are replaced by a new gang (attempt 1), the healthy rank 0 included.
  ASSERT_TRUE(wait_pods("gang", 2, "1"));
  for (const auto& p : pods("gang")) EXPECT_NE(p["metadata"]["uid"], uid0);
  EXPECT_EQ(job("gang")["status"]["restarts"], 1);
  EXPECT_EQ(condition("gang", "Restarting")["status"], "True");
  EXPECT_EQ(condition("gang", "Restarting")["reason"], "WorkerFailed");
  EXPECT_TRUE(eventually([&] { return has_event("gang", "WorkerFailed"); }));
  // The new gang resumes from the checkpoint: same config, resume: auto.
  const json cm = server->get("/api/v1/namespaces/default/configmaps/gang-config");
  EXPECT_EQ(json::parse(cm["data"]["config.json"].get<std::string>())["checkpoint"]["resume"],
            "auto");

  run_all("gang", 2);
  ASSERT_TRUE(wait_phase("gang", "Running"));
  EXPECT_EQ(condition("gang", "Restarting")["status"], "False");
  expect_status_matches_schema("gang");
}

TEST_F(OperatorTest, DeletedAndEvictedWorkersAlsoRestartTheGang) {
  start_operator();
  create_job("lost");
  ASSERT_TRUE(wait_pods("lost", 2, "0"));
  run_all("lost", 2);
  ASSERT_TRUE(wait_phase("lost", "Running"));
  ASSERT_EQ(server->call("DELETE", pod_path("lost-worker-0")).code, 200);
  ASSERT_TRUE(wait_pods("lost", 2, "1"));
  EXPECT_EQ(job("lost")["status"]["restarts"], 1);
  EXPECT_EQ(condition("lost", "Restarting")["reason"], "WorkerLost");

  run_all("lost", 2);
  ASSERT_TRUE(wait_phase("lost", "Running"));
  set_pod_status("lost-worker-1", {{"phase", "Failed"},
                                   {"reason", "Evicted"},
                                   {"message", "The node was low on resource: memory."}});
  ASSERT_TRUE(wait_pods("lost", 2, "2"));
  EXPECT_EQ(condition("lost", "Restarting")["reason"], "Evicted");
}

TEST_F(OperatorTest, BackoffLimitExhaustedFailsTheJob) {
  start_operator();
  create_job("flaky", [](json& j) { j["spec"]["runPolicy"]["backoffLimit"] = 1; });
  ASSERT_TRUE(wait_pods("flaky", 2, "0"));
  run_all("flaky", 2);
  exit_pod("flaky-worker-0", 137, "OOMKilled");
  ASSERT_TRUE(wait_pods("flaky", 2, "1"));
  run_all("flaky", 2);
  exit_pod("flaky-worker-1", 1);
  ASSERT_TRUE(wait_phase("flaky", "Failed"));
  EXPECT_EQ(condition("flaky", "Failed")["reason"], "BackoffLimitExceeded");
  EXPECT_EQ(job("flaky")["status"]["restarts"], 1);
  // The surviving worker is stopped; the failed one stays for its logs.
  ASSERT_TRUE(wait_pods("flaky", 1));
  EXPECT_EQ(pods("flaky")[0]["metadata"]["name"], "flaky-worker-1");
  EXPECT_TRUE(eventually([&] { return has_event("flaky", "BackoffLimitExceeded"); }));
}

TEST_F(OperatorTest, ConfigurationErrorFailsWithoutRetry) {
  start_operator();
  create_job("badcfg");
  ASSERT_TRUE(wait_pods("badcfg", 2, "0"));
  run_all("badcfg", 2);
  exit_pod("badcfg-worker-1", 2);
  ASSERT_TRUE(wait_phase("badcfg", "Failed"));
  EXPECT_EQ(condition("badcfg", "Failed")["reason"], "ConfigError");
  EXPECT_EQ(job("badcfg")["status"]["restarts"], 0);
  ASSERT_TRUE(wait_pods("badcfg", 1));  // worker 0 deleted, no new gang
  EXPECT_EQ(server->request_count("POST", "/api/v1/namespaces/default/pods"), 2u);
}

TEST_F(OperatorTest, InvalidManifestIsRejectedWithAClearReason) {
  start_operator();
  create_job("invalid", [](json& j) { j["spec"]["workers"]["replicas"] = 0; });
  ASSERT_TRUE(wait_phase("invalid", "Failed"));
  const json c = condition("invalid", "Failed");
  EXPECT_EQ(c["reason"], "InvalidSpec");
  EXPECT_NE(c["message"].get<std::string>().find("spec.workers.replicas: must be >= 1"),
            std::string::npos)
      << c;
  EXPECT_TRUE(eventually([&] { return has_event("invalid", "InvalidSpec"); }));
  EXPECT_TRUE(pods("invalid").empty());

  // Fixing the spec (a new generation) starts the job.
  server->call("PATCH", jobs_path("invalid"), {{"spec", {{"workers", {{"replicas", 1}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(wait_pods("invalid", 1, "0"));
}

TEST_F(OperatorTest, OperatorRestartMidJobCreatesNoDuplicates) {
  start_operator();
  create_job("survivor");
  ASSERT_TRUE(wait_pods("survivor", 2, "0"));
  run_all("survivor", 2);
  ASSERT_TRUE(wait_phase("survivor", "Running"));
  std::set<std::string> uids;
  for (const auto& p : pods("survivor")) uids.insert(p["metadata"]["uid"]);
  managers.back()->stop();

  start_operator();                  // a fresh process: empty caches, no memory of the job
  exit_pod("survivor-worker-0", 0);  // something to react to
  ASSERT_TRUE(eventually([&] { return job("survivor")["status"]["workers"]["succeeded"] == 1; }));
  std::set<std::string> after;
  for (const auto& p : pods("survivor")) after.insert(p["metadata"]["uid"]);
  EXPECT_EQ(after, uids);
  EXPECT_EQ(job("survivor")["status"]["restarts"], 0);
  EXPECT_EQ(phase("survivor"), "Running");
}

TEST_F(OperatorTest, TwoOperatorsOneLeader) {
  Manager& a = start_operator(options(true, "op-a"));
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  Manager& b = start_operator(options(true, "op-b"));
  create_job("led");
  ASSERT_TRUE(wait_pods("led", 2, "0"));
  // b stays a follower for longer than a lease while a renews.
  EXPECT_FALSE(eventually([&] { return b.is_leader(); }, milliseconds(1500)));
  const json lease = server->get(
      "/apis/coordination.k8s.io/v1/namespaces/kubetune-system/leases/kubetune-operator");
  EXPECT_EQ(lease["spec"]["holderIdentity"], "op-a");

  a.stop(/*release_lease=*/false);  // a crash: the lease has to expire
  ASSERT_TRUE(eventually([&] { return b.is_leader(); }, milliseconds(5000)));
  run_all("led", 2);
  ASSERT_TRUE(wait_phase("led", "Running"));  // b reconciles now
  EXPECT_EQ(server->get(
                "/apis/coordination.k8s.io/v1/namespaces/kubetune-system/leases/kubetune-operator")
                ["spec"]["holderIdentity"],
            "op-b");
}

TEST_F(OperatorTest, GracefulStopHandsTheLeaseOverAtOnce) {
  Manager& a = start_operator(options(true, "op-a"));
  ASSERT_TRUE(eventually([&] { return a.is_leader(); }));
  auto slow = options(true, "op-b");
  slow.leader.lease_duration = milliseconds(30000);  // would take 30 s if a did not release
  Manager& b = start_operator(slow);
  a.stop();
  EXPECT_TRUE(eventually([&] { return b.is_leader(); }, milliseconds(3000)));
}

TEST_F(OperatorTest, RecoversFromDroppedWatchesAndCompaction) {
  Manager& op = start_operator();
  create_job("one");
  ASSERT_TRUE(wait_pods("one", 2));
  server->drop_watches();
  create_job("two");
  ASSERT_TRUE(wait_pods("two", 2));
  const int lists = op.job_informer()->list_count();
  // Watches drop, history is compacted: re-watching from the old resourceVersion gets 410 Gone
  // and the informer lists again.
  server->compact_now();
  server->drop_watches();
  create_job("three");
  server->compact_now();
  ASSERT_TRUE(wait_pods("three", 2));
  run_all("one", 2);
  ASSERT_TRUE(wait_phase("one", "Running"));
  SUCCEED() << "lists: " << lists << " -> " << op.job_informer()->list_count();
}

TEST_F(OperatorTest, SuspendDeletesPodsAndResumeRecreatesThem) {
  start_operator();
  create_job("pause");
  ASSERT_TRUE(wait_pods("pause", 2, "0"));
  run_all("pause", 2);
  ASSERT_TRUE(wait_phase("pause", "Running"));
  server->call("PATCH", jobs_path("pause"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(wait_phase("pause", "Suspended"));
  ASSERT_TRUE(wait_pods("pause", 0));
  EXPECT_EQ(condition("pause", "Suspended")["status"], "True");
  EXPECT_TRUE(eventually([&] { return has_event("pause", "Suspended"); }));

  server->call("PATCH", jobs_path("pause"), {{"spec", {{"runPolicy", {{"suspend", false}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(wait_pods("pause", 2, "0"));
  // The pods are created before the status of the same pass is written.
  ASSERT_TRUE(eventually([&] { return condition("pause", "Suspended")["status"] == "False"; }));
  EXPECT_EQ(condition("pause", "Suspended")["reason"], "Resumed");
  EXPECT_EQ(job("pause")["status"]["restarts"], 0);  // a resume is not a failure
  EXPECT_TRUE(eventually([&] { return has_event("pause", "Resumed"); }));
}

TEST_F(OperatorTest, ActiveDeadlineFailsTheJob) {
  start_operator();
  // status.startTime has whole seconds (as in a Kubernetes Job), so a deadline may come up to a
  // second early: 3 s leaves room to see the gang before it.
  create_job("slow", [](json& j) { j["spec"]["runPolicy"]["activeDeadlineSeconds"] = 3; });
  ASSERT_TRUE(wait_pods("slow", 2));
  run_all("slow", 2);
  ASSERT_TRUE(wait_phase("slow", "Failed", milliseconds(8000)));
  EXPECT_EQ(condition("slow", "Failed")["reason"], "DeadlineExceeded");
  ASSERT_TRUE(wait_pods("slow", 0));
}

TEST_F(OperatorTest, FinishedJobIsDeletedAfterItsTtl) {
  start_operator();
  create_job("brief", [](json& j) { j["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 1; });
  ASSERT_TRUE(wait_pods("brief", 2));
  exit_pod("brief-worker-0", 0);
  exit_pod("brief-worker-1", 0);
  ASSERT_TRUE(wait_phase("brief", "Succeeded"));
  ASSERT_TRUE(eventually([&] { return server->call("GET", jobs_path("brief")).code == 404; },
                         milliseconds(5000)));
  // Garbage collection took its objects.
  EXPECT_TRUE(pods("brief").empty());
  EXPECT_EQ(server->call("GET", "/api/v1/namespaces/default/configmaps/brief-config").code, 404);
}

TEST_F(OperatorTest, ProgressIsReadFromRankZero) {
  // A stand-in for rank 0's exporter.
  auto reg = std::make_shared<prometheus::Registry>();
  namespace ts = metrics::trainer_series;
  const prometheus::Labels l = {{"job", "prog"}, {"rank", "0"}, {"local_rank", "0"}};
  auto gauge = [&](std::string_view name) -> prometheus::Gauge& {
    return metrics::gauge_family(*reg, ts::kAll, name).Add(l);
  };
  gauge(ts::kStep).Set(40);
  gauge(ts::kTotalSteps).Set(100);
  gauge(ts::kTrainLoss).Set(1.25);
  gauge(ts::kTokensPerSecond).Set(500);
  gauge(ts::kEtaSeconds).Set(60);
  gauge(ts::kEpoch).Set(0.4);
  gauge(ts::kMicroBatchSize).Set(16);
  metrics::counter_family(*reg, ts::kAll, ts::kCheckpointsTotal).Add(l).Increment();
  auto& recoveries =
      metrics::counter_family(*reg, ts::kAll, ts::kOutOfMemoryRecoveriesTotal).Add(l);
  metrics::HttpEndpoint exporter("127.0.0.1", 0);
  exporter.add_registry(reg);

  start_operator();
  create_job("prog", [&](json& j) { j["spec"]["metrics"]["port"] = exporter.port(); });
  ASSERT_TRUE(wait_pods("prog", 2));
  run_all("prog", 2);
  ASSERT_TRUE(eventually([&] {
    return job("prog")["status"].value("progress", json::object()).value("step", 0) == 40;
  }));
  const json st = job("prog")["status"];
  EXPECT_EQ(st["progress"]["totalSteps"], 100);
  EXPECT_EQ(st["progress"]["summary"], "40/100");
  EXPECT_DOUBLE_EQ(st["progress"]["loss"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(st["progress"]["tokensPerSecond"].get<double>(), 1000);  // 2 ranks x 500
  EXPECT_DOUBLE_EQ(st["progress"]["etaSeconds"].get<double>(), 60);
  EXPECT_EQ(st["progress"]["eta"], "1m00s");  // kubectl get's ETA column
  EXPECT_TRUE(st["progress"].contains("stepTime"));
  EXPECT_EQ(st["lastCheckpoint"]["count"], 1);
  EXPECT_EQ(st["lastCheckpoint"]["path"], "/data/runs/llama-lora-chat/checkpoints");
  expect_status_matches_schema("prog");
  // Later steps show up on the next period.
  gauge(ts::kStep).Set(41);
  EXPECT_TRUE(eventually([&] { return job("prog")["status"]["progress"]["step"] == 41; }));
  EXPECT_EQ(job("prog")["status"]["progress"]["microBatchSize"], 16);
  EXPECT_FALSE(has_event("prog", "OutOfMemoryRecovered"));
  // A step ran out of GPU memory and was re-run at 8: counted, shown and told once.
  recoveries.Increment();
  gauge(ts::kMicroBatchSize).Set(8);
  EXPECT_TRUE(eventually(
      [&] { return job("prog")["status"]["progress"].value("outOfMemoryRecoveries", 0) == 1; }));
  EXPECT_EQ(job("prog")["status"]["progress"]["microBatchSize"], 8);
  EXPECT_TRUE(eventually([&] { return has_event("prog", "OutOfMemoryRecovered"); }));
  gauge(ts::kStep).Set(42);
  EXPECT_TRUE(eventually([&] { return job("prog")["status"]["progress"]["step"] == 42; }));
  EXPECT_EQ(job("prog")["status"]["progress"]["outOfMemoryRecoveries"], 1);
  expect_status_matches_schema("prog");
}

// Rank 0 serves its metrics but its step stops advancing (a hung filesystem, a deadlocked data
// loader; the collective timeout cannot see these): after runPolicy.stallTimeoutSeconds the
// gang is restarted with reason Stalled, counted against backoffLimit.
TEST_F(OperatorTest, StalledStepRestartsTheGang) {
  auto reg = std::make_shared<prometheus::Registry>();
  namespace ts = metrics::trainer_series;
  const prometheus::Labels l = {{"job", "stuck"}, {"rank", "0"}, {"local_rank", "0"}};
  metrics::gauge_family(*reg, ts::kAll, ts::kStep).Add(l).Set(7);
  metrics::gauge_family(*reg, ts::kAll, ts::kTotalSteps).Add(l).Set(100);
  metrics::HttpEndpoint exporter("127.0.0.1", 0);
  exporter.add_registry(reg);

  start_operator();
  create_job("stuck", [&](json& j) {
    j["spec"]["metrics"]["port"] = exporter.port();
    j["spec"]["runPolicy"]["stallTimeoutSeconds"] = 2;
  });
  ASSERT_TRUE(wait_pods("stuck", 2));
  run_all("stuck", 2);
  ASSERT_TRUE(eventually([&] { return job("stuck")["status"].value("restarts", 0) == 1; },
                         milliseconds(10000)));
  const json restarting = condition("stuck", "Restarting");
  EXPECT_EQ(restarting["reason"], "Stalled");
  EXPECT_NE(restarting["message"].get<std::string>().find(
                "rank 0 has not finished a step for 2 s (runPolicy.stallTimeoutSeconds; last seen: "
                "step 7)"),
            std::string::npos)
      << restarting.dump();
}

TEST_F(OperatorTest, TransientApiErrorsAreRetriedWithBackOff) {
  server->inject_error("POST", "/api/v1/namespaces/default/pods", 500, 2);
  server->inject_error("PUT", jobs_path("retry") + "/status", 409, 1);
  start_operator();
  create_job("retry");
  ASSERT_TRUE(wait_pods("retry", 2));
  ASSERT_TRUE(wait_phase("retry", "Created"));
}

}  // namespace
}  // namespace kubetune::op::testing
