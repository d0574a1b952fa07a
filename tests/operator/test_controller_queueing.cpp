// Gang scheduling and Kueue against the fake API server: the tests play the scheduler (a pod's
// nodeName and PodScheduled condition) and Kueue (a Workload's admission, eviction). The real
// kube-scheduler and Kueue's own controller drive the same paths in
// tests/e2e/shared_cluster_e2e.sh.
#include <gtest/gtest.h>

#include "common/metrics/scrape.h"
#include "operator_fixture.h"

namespace kubetune::op::testing {
namespace {

const char* kWorkloads = "/apis/kueue.x-k8s.io/v1beta2/namespaces/default/workloads";

class SchedulingTest : public OperatorTest {
 protected:
  // The scheduler's part: bound to a node, or Unschedulable with its message.
  void bind(const std::string& pod) {
    auto r = server->call("PATCH", pod_path(pod), {{"spec", {{"nodeName", "gpu-node-a"}}}},
                          "application/merge-patch+json");
    ASSERT_EQ(r.code, 200) << r.body.dump();
  }
  void unschedulable(const std::string& pod) {
    set_pod_status(pod,
                   {{"conditions",
                     {{{"type", "PodScheduled"},
                       {"status", "False"},
                       {"reason", "Unschedulable"},
                       {"message", "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}}}}});
  }
  double metric(Manager& op, const std::string& series) {
    const auto m = metrics::parse_text_format(
        metrics::http_get("http://127.0.0.1:" + std::to_string(op.http_port()) + "/metrics", 2000));
    const auto it = m.find(series);
    return it == m.end() ? -1 : it->second;
  }
};

TEST_F(SchedulingTest, PartlyScheduledGangIsNamedThenReleased) {
  Manager& op = start_operator();
  create_job("big", [](json& j) {
    j["spec"]["workers"]["replicas"] = 3;
    j["spec"]["workers"]["gpusPerWorker"] = 8;
    j["spec"]["runPolicy"]["schedulingTimeoutSeconds"] = 2;
  });
  ASSERT_TRUE(wait_pods("big", 3, "0"));
  bind("big-worker-0");
  bind("big-worker-1");
  unschedulable("big-worker-2");
  ASSERT_TRUE(
      eventually([&] { return condition("big", "Scheduled")["reason"] == "PartiallyScheduled"; }));
  const std::string message = condition("big", "Scheduled")["message"];
  EXPECT_NE(message.find("worker 2 (pod big-worker-2): 0/2 nodes are available"), std::string::npos)
      << message;
  EXPECT_NE(message.find("hold 16 GPUs"), std::string::npos) << message;
  EXPECT_EQ(condition("big", "Scheduled")["status"], "False");
  const json scheduling = job("big")["status"]["scheduling"];
  EXPECT_EQ(scheduling["boundWorkers"], 2);
  EXPECT_EQ(scheduling["unscheduledWorkers"], 1);
  EXPECT_EQ(scheduling["heldGPUs"], 16);
  EXPECT_TRUE(eventually([&] { return has_event("big", "PartiallyScheduled"); }));
  const std::string labels = "{job=\"big\",namespace=\"default\"}";
  EXPECT_EQ(metric(op, "kubetune_operator_job_idle_held_gpus" + labels), 16);
  EXPECT_EQ(metric(op, "kubetune_operator_job_unscheduled_workers" + labels), 1);

  // Past schedulingTimeoutSeconds: every pod deleted, the release recorded, not a restart.
  ASSERT_TRUE(
      eventually([&] { return condition("big", "Scheduled")["reason"] == "SchedulingTimeout"; },
                 milliseconds(8000)));
  ASSERT_TRUE(wait_pods("big", 0));
  const json status = job("big")["status"];
  EXPECT_EQ(status["scheduling"]["releases"], 1);
  EXPECT_TRUE(status["scheduling"].contains("nextAttemptTime"));
  EXPECT_EQ(status["restarts"], 0);
  EXPECT_EQ(status["phase"], "Pending");
  EXPECT_TRUE(eventually([&] { return has_event("big", "SchedulingTimeout"); }));
  EXPECT_EQ(metric(op, "kubetune_operator_job_gang_releases_total" + labels), 1);
  EXPECT_EQ(metric(op, "kubetune_operator_job_idle_held_gpus" + labels), 0);
  expect_status_matches_schema("big");
}

TEST_F(SchedulingTest, UnboundGangWaitsAndAPlacedOneIsScheduled) {
  start_operator();
  create_job("wait", [](json& j) { j["spec"]["runPolicy"]["schedulingTimeoutSeconds"] = 1; });
  ASSERT_TRUE(wait_pods("wait", 2, "0"));
  unschedulable("wait-worker-0");
  unschedulable("wait-worker-1");
  ASSERT_TRUE(
      eventually([&] { return condition("wait", "Scheduled")["reason"] == "Unschedulable"; }));
  // Nothing is held, so nothing is released however long it waits.
  std::this_thread::sleep_for(milliseconds(2500));
  EXPECT_EQ(pods("wait").size(), 2u);
  EXPECT_EQ(job("wait")["status"]["scheduling"]["heldGPUs"], 0);
  bind("wait-worker-0");
  bind("wait-worker-1");
  ASSERT_TRUE(
      eventually([&] { return condition("wait", "Scheduled")["reason"] == "AllScheduled"; }));
  EXPECT_EQ(condition("wait", "Scheduled")["status"], "True");
  EXPECT_EQ(job("wait")["status"]["scheduling"]["unscheduledWorkers"], 0);
}

class KueueTest : public SchedulingTest {
 protected:
  void SetUp() override {
    SchedulingTest::SetUp();
    server->register_resource({"kueue.x-k8s.io", "v1beta2", "workloads", "Workload", true, true});
    server->register_resource(
        {"kueue.x-k8s.io", "v1beta2", "resourceflavors", "ResourceFlavor", false, false});
    server->register_resource({"kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses",
                               "WorkloadPriorityClass", false, false});
    server->call(
        "POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
        {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
         {"kind", "ResourceFlavor"},
         {"metadata", {{"name", "h100"}}},
         {"spec",
          {{"nodeLabels", {{"nvidia.com/gpu.product", "H100"}}},
           {"tolerations",
            {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}}}}});
    server->call("POST", "/apis/kueue.x-k8s.io/v1beta2/workloadpriorityclasses",
                 {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
                  {"kind", "WorkloadPriorityClass"},
                  {"metadata", {{"name", "high"}}},
                  {"value", 1000}});
  }
  json queued_job(const std::string& name) {
    return create_job(name, [](json& j) {
      j["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"},
                                 {"kueue.x-k8s.io/priority-class", "high"}};
    });
  }
  std::vector<json> workloads() {
    return server->call("GET", kWorkloads)
        .body.value("items", json::array())
        .get<std::vector<json>>();
  }
  std::string workload_path() {
    return std::string(kWorkloads) + "/" + workloads().at(0)["metadata"]["name"].get<std::string>();
  }
  // Kueue's part.
  void set_workload_status(const json& status) {
    json wl = server->get(workload_path());
    wl["status"] = status;
    auto r = server->call("PUT", workload_path() + "/status", wl);
    ASSERT_EQ(r.code, 200) << r.body.dump();
  }
  static json cond(const std::string& type, const std::string& status, const std::string& reason,
                   const std::string& message = "") {
    return {{"type", type},
            {"status", status},
            {"reason", reason},
            {"message", message},
            {"lastTransitionTime", "2026-01-01T00:00:00Z"}};
  }
  static json admission() {
    return {{"clusterQueue", "gpus"},
            {"podSetAssignments",
             {{{"name", "workers"},
               {"flavors", {{"nvidia.com/gpu", "h100"}, {"cpu", "h100"}, {"memory", "h100"}}},
               {"count", 2}}}}};
  }
  json workload_condition(const std::string& type) {
    for (const auto& c :
         server->get(workload_path())["status"].value("conditions", json::array())) {
      if (c["type"] == type) return c;
    }
    return nullptr;
  }
};

TEST_F(KueueTest, QueuedUntilAdmittedThenPlacedByTheFlavor) {
  start_operator();
  const json j = queued_job("q");
  ASSERT_TRUE(eventually([&] { return workloads().size() == 1; }));
  ASSERT_TRUE(wait_phase("q", "Queued"));
  const json wl = workloads()[0];
  EXPECT_EQ(wl["spec"]["queueName"], "team-a");
  EXPECT_EQ(wl["spec"]["priority"], 1000);
  EXPECT_EQ(wl["spec"]["priorityClassRef"]["name"], "high");
  EXPECT_EQ(wl["spec"]["podSets"][0]["count"], 2);
  EXPECT_EQ(wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
              ["nvidia.com/gpu"],
            1);
  EXPECT_EQ(wl["metadata"]["ownerReferences"][0]["uid"], j["metadata"]["uid"]);
  EXPECT_EQ(wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], j["metadata"]["uid"]);
  EXPECT_EQ(condition("q", "Admitted")["status"], "False");
  std::this_thread::sleep_for(milliseconds(500));
  EXPECT_TRUE(pods("q").empty()) << "no worker before admission";

  set_workload_status(
      {{"admission", admission()},
       {"conditions",
        {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")}}});
  ASSERT_TRUE(wait_pods("q", 2, "0"));
  for (const auto& pod : pods("q")) {
    EXPECT_EQ(pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"], "H100");
    EXPECT_EQ(pod["spec"]["tolerations"].back()["key"], "nvidia.com/gpu");
  }
  EXPECT_EQ(condition("q", "Admitted")["reason"], "Admitted");
  EXPECT_EQ(job("q")["status"]["queue"]["clusterQueue"], "gpus");

  // Before every worker runs, and once they do: the PodsReady condition Kueue's waitForPodsReady
  // reads, as its own job integrations write it.
  ASSERT_TRUE(
      eventually([&] { return workload_condition("PodsReady")["reason"] == "WaitForStart"; }));
  EXPECT_EQ(workload_condition("PodsReady")["status"], "False");
  run_all("q", 2);
  ASSERT_TRUE(wait_phase("q", "Running"));
  ASSERT_TRUE(eventually([&] { return workload_condition("PodsReady")["reason"] == "Started"; }));
  EXPECT_EQ(workload_condition("PodsReady")["status"], "True");
  exit_pod("q-worker-0", 0);
  exit_pod("q-worker-1", 0);
  ASSERT_TRUE(wait_phase("q", "Succeeded"));
  ASSERT_TRUE(eventually([&] { return workload_condition("Finished")["status"] == "True"; }));
  EXPECT_EQ(workload_condition("Finished")["reason"], "Succeeded");
  expect_status_matches_schema("q");
}

TEST_F(KueueTest, EvictionStopsTheGangThenGivesTheQuotaBack) {
  Manager& op = start_operator();
  queued_job("e");
  ASSERT_TRUE(eventually([&] { return workloads().size() == 1; }));
  set_workload_status(
      {{"admission", admission()},
       {"conditions",
        {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")}}});
  ASSERT_TRUE(wait_pods("e", 2, "0"));
  run_all("e", 2);
  ASSERT_TRUE(wait_phase("e", "Running"));

  // Kueue preempts: Evicted=True, the admission still held.
  set_workload_status(
      {{"admission", admission()},
       {"conditions",
        {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"),
         cond("Evicted", "True", "Preempted",
              "Preempted to accommodate a higher priority Workload")}}});
  ASSERT_TRUE(wait_phase("e", "Queued"));
  EXPECT_EQ(condition("e", "Admitted")["reason"], "WorkloadEvicted");
  // The pods were deleted; the fake API server has no kubelet, so they go at once. The quota is
  // given back only after that.
  ASSERT_TRUE(wait_pods("e", 0));
  ASSERT_TRUE(eventually([&] { return workload_condition("QuotaReserved")["status"] == "False"; }));
  const json wl = server->get(workload_path());
  EXPECT_FALSE(wl["status"].contains("admission"));
  EXPECT_EQ(workload_condition("Admitted")["status"], "False");
  EXPECT_EQ(workload_condition("Requeued")["status"], "True");
  const json status = job("e")["status"];
  EXPECT_EQ(status["queue"]["evictions"], 1);
  EXPECT_EQ(status["restarts"], 0) << "an eviction is not a failure";
  EXPECT_TRUE(eventually([&] { return has_event("e", "WorkloadEvicted"); }));
  EXPECT_EQ(metric(op, "kubetune_operator_job_evictions_total{job=\"e\",namespace=\"default\"}"),
            1);

  // Admitted again: a new gang (same attempt: the trainer resumes from its checkpoint).
  set_workload_status(
      {{"admission", admission()},
       {"conditions",
        {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"),
         cond("Evicted", "False", "Admitted")}}});
  ASSERT_TRUE(wait_pods("e", 2, "0"));
  EXPECT_EQ(job("e")["status"]["queue"]["evictions"], 1);
}

TEST_F(KueueTest, SuspendDeactivatesTheWorkload) {
  start_operator();
  queued_job("s");
  ASSERT_TRUE(eventually([&] { return workloads().size() == 1; }));
  server->call("PATCH", jobs_path("s"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] { return workloads().at(0)["spec"]["active"] == false; }));
  ASSERT_TRUE(wait_phase("s", "Suspended"));
  server->call("PATCH", jobs_path("s"), {{"spec", {{"runPolicy", {{"suspend", false}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] { return workloads().at(0)["spec"]["active"] == true; }));
  ASSERT_TRUE(wait_phase("s", "Queued"));
}

// An administrator deactivates the job's Workload (spec.active=false, as `kueuectl stop workload`
// does) and Kueue evicts it: the gang stops through its checkpoint, the job says Deactivated and
// keeps its place, and spec.active stays false (the operator writes it only when runPolicy.suspend
// changes), as does the administrator's label. Reactivated, Kueue admits it again and the gang
// resumes; deactivated again, the user's suspend-and-resume also reactivates it.
TEST_F(KueueTest, AWorkloadDeactivatedByAnAdministratorStaysDeactivated) {
  start_operator();
  queued_job("d");
  ASSERT_TRUE(eventually([&] { return workloads().size() == 1; }));
  const json admitted = {
      {"admission", admission()},
      {"conditions",
       {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted")}}};
  set_workload_status(admitted);
  ASSERT_TRUE(wait_pods("d", 2, "0"));
  run_all("d", 2);
  ASSERT_TRUE(wait_phase("d", "Running"));

  auto deactivate = [&] {
    auto r = server->call("PATCH", workload_path(),
                          {{"metadata", {{"labels", {{"team.example.com/owner", "admin"}}}}},
                           {"spec", {{"active", false}}}},
                          "application/merge-patch+json");
    ASSERT_EQ(r.code, 200) << r.body.dump();
    set_workload_status(
        {{"admission", admission()},
         {"conditions",
          {cond("QuotaReserved", "True", "QuotaReserved"), cond("Admitted", "True", "Admitted"),
           cond("Evicted", "True", "Deactivated", "The workload is deactivated")}}});
  };
  deactivate();
  ASSERT_TRUE(wait_pods("d", 0));
  ASSERT_TRUE(wait_phase("d", "Queued"));
  ASSERT_TRUE(eventually([&] { return condition("d", "Admitted")["reason"] == "Deactivated"; }));
  EXPECT_TRUE(eventually([&] { return has_event("d", "Deactivated"); }));
  ASSERT_TRUE(eventually([&] { return workload_condition("QuotaReserved")["status"] == "False"; }));
  std::this_thread::sleep_for(milliseconds(500));
  const json wl = workloads().at(0);
  EXPECT_EQ(wl["spec"]["active"], false) << "the operator undid the administrator's deactivation";
  EXPECT_EQ(wl["metadata"]["labels"]["team.example.com/owner"], "admin");
  EXPECT_TRUE(pods("d").empty());
  EXPECT_EQ(job("d")["status"]["restarts"], 0) << "a deactivation is not a failure";
  expect_status_matches_schema("d");

  // Reactivated by the administrator: Kueue admits it again, the gang comes back.
  server->call("PATCH", workload_path(), {{"spec", {{"active", true}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] { return has_event("d", "Reactivated"); }));
  set_workload_status(admitted);
  ASSERT_TRUE(wait_pods("d", 2, "0"));

  // Deactivated again; the user suspends and resumes the job: that reactivates it.
  deactivate();
  ASSERT_TRUE(wait_pods("d", 0));
  server->call("PATCH", jobs_path("d"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(wait_phase("d", "Suspended"));
  EXPECT_EQ(workloads().at(0)["spec"]["active"], false);
  server->call("PATCH", jobs_path("d"), {{"spec", {{"runPolicy", {{"suspend", false}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] { return workloads().at(0)["spec"]["active"] == true; }));
  EXPECT_EQ(workloads().at(0)["metadata"]["labels"]["team.example.com/owner"], "admin");
}

TEST_F(OperatorTest, QueueLabelWithoutKueueIsNamed) {
  start_operator();
  create_job("nokueue", [](json& j) {
    j["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"}};
  });
  ASSERT_TRUE(wait_phase("nokueue", "Queued"));
  EXPECT_EQ(condition("nokueue", "Admitted")["reason"], "QueueUnavailable");
  const std::string message = condition("nokueue", "Admitted")["message"];
  EXPECT_NE(message.find("found no kueue.x-k8s.io/v1beta2 Workloads it may list"),
            std::string::npos)
      << message;
  EXPECT_TRUE(pods("nokueue").empty());
}

}  // namespace
}  // namespace kubetune::op::testing
