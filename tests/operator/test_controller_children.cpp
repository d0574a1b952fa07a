// The operator's children against the fake API server: found by owner UID (never by name or label
// alone), refusals shown where users look, spec edits made while suspended applied on resume, and
// a clean stop of the real binary on SIGTERM. tests/e2e runs the same against a real API server.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "operator_fixture.h"

namespace kubetune::op::testing {
namespace {

TEST_F(OperatorTest, RefusedPodIsShownInStatusAndEventsThenRetried) {
  server->inject_error("POST", "/api/v1/namespaces/default/pods", 403, 3);
  start_operator();
  create_job("refused");
  ASSERT_TRUE(eventually([&] {
    const json c = condition("refused", "Created");
    return !c.is_null() && c["reason"] == "FailedCreate" && c["status"] == "False";
  }));
  EXPECT_NE(condition("refused", "Created")["message"].get<std::string>().find("403"),
            std::string::npos);
  EXPECT_TRUE(eventually([&] { return has_event("refused", "FailedCreate"); }));
  // The refusal passes (a PriorityClass was created, say): the back-off retries and succeeds.
  ASSERT_TRUE(wait_pods("refused", 2, "0"));
  ASSERT_TRUE(wait_phase("refused", "Created"));
  EXPECT_EQ(condition("refused", "Created")["status"], "True");
}

TEST_F(OperatorTest, PodsOfAnEarlierJobWithTheSameNameAreNotItsOwn) {
  start_operator();
  create_job("again");
  ASSERT_TRUE(wait_pods("again", 2, "0"));
  run_all("again", 2);
  ASSERT_TRUE(wait_phase("again", "Running"));
  // Deleted with --cascade=orphan: its pods, ConfigMap and Service stay, owned by nobody.
  ASSERT_EQ(server->call("DELETE", jobs_path("again") + "?propagationPolicy=Orphan").code, 200);
  const json old_uid = pods("again")[0]["metadata"]["uid"];
  create_job("again");
  ASSERT_TRUE(eventually([&] {
    const json c = condition("again", "Created");
    return !c.is_null() && c["reason"] == "NameConflict";
  }));
  // The event is posted apart from the status write, and may land just after it.
  EXPECT_TRUE(eventually([&] { return has_event("again", "NameConflict"); }));
  EXPECT_NE(phase("again"), "Succeeded");
  EXPECT_NE(phase("again"), "Restarting");
  // The orphaned ConfigMap was adopted (it only holds what the spec says); pods never are.
  const json cm = server->get("/api/v1/namespaces/default/configmaps/again-config");
  EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["uid"], job("again")["metadata"]["uid"]);
  // Once the old pods go, the job makes its own.
  for (int rank = 0; rank < 2; ++rank) {
    server->call("DELETE", pod_path("again-worker-" + std::to_string(rank)));
  }
  ASSERT_TRUE(eventually([&] {
    auto ps = pods("again");
    return ps.size() == 2 && ps[0]["metadata"]["uid"] != old_uid &&
           ps[0]["metadata"]["ownerReferences"][0]["uid"] == job("again")["metadata"]["uid"];
  }));
  EXPECT_EQ(job("again")["status"].value("restarts", 0), 0);
}

TEST_F(OperatorTest, ReCreatedJobWaitsForTheOldPodsToGo) {
  start_operator();
  create_job("again2");
  ASSERT_TRUE(wait_pods("again2", 2, "0"));
  // A finalizer keeps worker 0 terminating after the job is deleted (as a kubelet would while the
  // container stops).
  ASSERT_EQ(
      server
          ->call("PATCH", pod_path("again2-worker-0"),
                 {{"metadata", {{"finalizers", {"test/hold"}}}}}, "application/merge-patch+json")
          .code,
      200);
  ASSERT_EQ(server->call("DELETE", jobs_path("again2")).code, 200);
  ASSERT_TRUE(eventually([&] {
    const auto ps = pods("again2");
    return ps.size() == 1 && ps[0]["metadata"].contains("deletionTimestamp");
  }));
  create_job("again2");
  ASSERT_TRUE(eventually([&] {
    const json c = condition("again2", "Created");
    return !c.is_null() && c["reason"] == "WaitingForOldObjects";
  }));
  // The old pod is not taken for a lost worker of the new job: no restart is counted.
  EXPECT_NE(phase("again2"), "Restarting");
  EXPECT_EQ(job("again2")["status"].value("restarts", 0), 0);
  server->call("PATCH", pod_path("again2-worker-0"), {{"metadata", {{"finalizers", nullptr}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] {
    auto ps = pods("again2");
    return ps.size() == 2 && !ps[0]["metadata"].contains("deletionTimestamp") &&
           ps[0]["metadata"]["ownerReferences"][0]["uid"] == job("again2")["metadata"]["uid"];
  }));
  EXPECT_EQ(job("again2")["status"].value("restarts", 0), 0);
}

TEST_F(OperatorTest, SpecEditedWhileSuspendedRunsOnResume) {
  start_operator();
  create_job("edit");
  ASSERT_TRUE(wait_pods("edit", 2, "0"));
  server->call("PATCH", jobs_path("edit"), {{"spec", {{"runPolicy", {{"suspend", true}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(wait_phase("edit", "Suspended"));
  ASSERT_TRUE(wait_pods("edit", 0));
  server->call("PATCH", jobs_path("edit"),
               {{"spec",
                 {{"workers", {{"replicas", 3}}},
                  {"training", {{"learningRate", 0.0005}}},
                  {"runPolicy", {{"suspend", false}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(wait_pods("edit", 3, "0"));
  for (const auto& pod : pods("edit")) {
    for (const auto& e : pod["spec"]["containers"][0]["env"]) {
      if (e["name"] == "NNODES") {
        EXPECT_EQ(e["value"], "3");
      }
    }
  }
  const json cm = server->get("/api/v1/namespaces/default/configmaps/edit-config");
  EXPECT_EQ(json::parse(cm["data"]["config.json"].get<std::string>())["training"]["learningRate"],
            0.0005);
}

TEST_F(OperatorTest, PodsOfAnotherSpecAreReplacedWithoutCountingARestart) {
  // What an edit made behind the CRD's back (a CRD without the transition rule) leads to.
  start_operator();
  create_job("drift");
  ASSERT_TRUE(wait_pods("drift", 2, "0"));
  const std::string before = pods("drift")[0]["metadata"]["annotations"]["kubetune.io/spec-hash"];
  server->call("PATCH", jobs_path("drift"), {{"spec", {{"training", {{"learningRate", 0.001}}}}}},
               "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] {
    auto ps = pods("drift");
    return ps.size() == 2 && ps[0]["metadata"]["annotations"]["kubetune.io/spec-hash"] != before &&
           ps[1]["metadata"]["annotations"]["kubetune.io/spec-hash"] != before;
  }));
  EXPECT_EQ(job("drift")["status"].value("restarts", 0), 0);
}

TEST_F(OperatorTest, ForbiddenLeaseIsFatalWithAClearMessage) {
  server->inject_error("GET", "/apis/coordination.k8s.io/v1/namespaces/kubetune-system/leases", 403,
                       1000);
  Manager& m = start_operator(options(true, "op-a"));
  EXPECT_EQ(m.wait(), Manager::Ended::kFatal);
  EXPECT_NE(m.fatal_error().find("--lease-namespace"), std::string::npos) << m.fatal_error();
  EXPECT_FALSE(m.ready());
}

// The real binary: SIGTERM while leading exits 0 and leaves the Lease free (it crashed with
// "terminate called without an active exception" and kept the Lease).
TEST_F(OperatorTest, SigtermEndsTheBinaryCleanlyAndReleasesTheLease) {
  const char* binary = std::getenv("KUBETUNE_OPERATOR");
  ASSERT_NE(binary, nullptr) << "KUBETUNE_OPERATOR is set by CMake";
  const std::string kubeconfig = ::testing::TempDir() + "/sigterm.kubeconfig";
  std::ofstream(kubeconfig) << "apiVersion: v1\nkind: Config\nclusters: [{name: f, cluster: "
                               "{server: \""
                            << server->url()
                            << "\"}}]\nusers: [{name: u, user: {}}]\ncontexts: [{name: f, "
                               "context: {cluster: f, user: u}}]\ncurrent-context: f\n";
  const std::string lease =
      "/apis/coordination.k8s.io/v1/namespaces/kubetune-system/leases/kubetune-operator";
  for (int round = 0; round < 3; ++round) {  // the crash was a race: try it more than once
    const pid_t pid = fork();
    if (pid == 0) {
      execl(binary, binary, "--kubeconfig", kubeconfig.c_str(), "--lease-namespace",
            "kubetune-system", "--http-port", "0", static_cast<char*>(nullptr));
      _exit(127);
    }
    ASSERT_TRUE(eventually([&] {
      const json l = server->get(lease);
      return l.contains("spec") && !l["spec"].value("holderIdentity", "").empty();
    }));
    create_job("sig" + std::to_string(round));
    ASSERT_TRUE(wait_pods("sig" + std::to_string(round), 2, "0"));
    kill(pid, SIGTERM);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(server->get(lease)["spec"].value("holderIdentity", "x"), "");
  }
}

}  // namespace
}  // namespace kubetune::op::testing
