// The preflight pod against the fake API server, with this test playing the kubelet and the
// trainer (tests/e2e feeds the real trainer's report to a real API server): the pod runs before
// any worker, without a GPU; its termination message (the trainer's compact report) becomes
// status.preflight; a bad line or a job too big fails the job with the trainer's verdict before a
// GPU pod exists; a preflight pod that ends without a verdict is tried again, up to backoffLimit.
#include <algorithm>
#include <thread>

#include "operator_fixture.h"

namespace kubetune::op::testing {
namespace {

class PreflightTest : public OperatorTest {
 protected:
  json create(const std::string& name, const std::function<void(json&)>& mutate = {}) {
    return create_job(name, [&](json& o) {
      o["spec"]["runPolicy"]["preflight"] = true;
      if (mutate) mutate(o);
    });
  }

  // A report as `kubetune-trainer preflight --termination-log` writes it.
  static json report(const std::string& verdict, const std::string& message = "") {
    json r = {{"verdict", verdict},
              {"data",
               {{"train",
                 {{"records", 24},
                  {"tokens", 480},
                  {"invalidRecords", verdict == "DatasetInvalid" ? 1 : 0}}}}},
              {"steps", {{"total", 12}}},
              {"memory", {{"totalGiB", 30.5}}}};
    if (!message.empty()) r["message"] = message;
    return r;
  }

  void end_preflight(const std::string& job, int code, const std::string& message,
                     const std::string& reason = "") {
    set_pod_status(job + "-preflight", {{"phase", code == 0 ? "Succeeded" : "Failed"},
                                        {"containerStatuses",
                                         {{{"name", "trainer"},
                                           {"state",
                                            {{"terminated",
                                              {{"exitCode", code},
                                               {"reason", !reason.empty() ? reason
                                                          : code == 0     ? "Completed"
                                                                          : "Error"},
                                               {"message", message}}}}}}}}});
  }

  std::vector<json> workers(const std::string& job) {
    std::vector<json> out;
    for (auto& p : pods(job)) {
      if (p["metadata"]["labels"].value("kubetune.io/role", "") != "preflight") out.push_back(p);
    }
    return out;
  }

  // status.preflight, or {} while there is none.
  json preflight_status(const std::string& name) {
    return job(name).value("status", json::object()).value("preflight", json::object());
  }

  json preflight_pod(const std::string& job) { return server->get(pod_path(job + "-preflight")); }

  static std::vector<std::string> command(const json& pod) {
    return pod["spec"]["containers"][0]["command"].get<std::vector<std::string>>();
  }
  static bool has_args(const std::vector<std::string>& cmd, const std::string& flag,
                       const std::string& value) {
    auto it = std::find(cmd.begin(), cmd.end(), flag);
    return it != cmd.end() && it + 1 != cmd.end() && *(it + 1) == value;
  }
};

TEST_F(PreflightTest, RunsOnACpuPodBeforeAnyWorkerThenTheGangStarts) {
  start_operator();
  create("pf", [](json& o) { o["spec"]["workers"]["gpuMemoryGiB"] = 80; });
  ASSERT_TRUE(eventually([&] { return pods("pf").size() == 1; }));
  const json pod = preflight_pod("pf");
  ASSERT_EQ(pod["metadata"]["name"], "pf-preflight") << pod.dump();
  const json& c = pod["spec"]["containers"][0];
  EXPECT_FALSE(c["resources"]["limits"].contains("nvidia.com/gpu")) << c["resources"].dump();
  EXPECT_EQ(c["resources"]["requests"]["memory"], "64Gi");  // the workers' CPU and memory
  EXPECT_EQ(c["env"][0], json({{"name", "NVIDIA_VISIBLE_DEVICES"}, {"value", "void"}}));
  EXPECT_EQ(c["terminationMessagePolicy"], "FallbackToLogsOnError");
  const auto cmd = command(pod);
  EXPECT_EQ(cmd[1], "preflight");
  EXPECT_TRUE(has_args(cmd, "--world-size", "2"));  // 2 pods x 1 GPU
  EXPECT_TRUE(has_args(cmd, "--gpu-memory-gib", "80"));
  EXPECT_TRUE(has_args(cmd, "--termination-log", "/dev/termination-log"));
  EXPECT_TRUE(has_args(cmd, "--config", "/etc/kubetune/config.json"));
  ASSERT_TRUE(eventually([&] { return condition("pf", "PreflightPassed").is_object(); }));
  EXPECT_EQ(condition("pf", "PreflightPassed")["reason"], "Checking");
  EXPECT_EQ(phase("pf"), "Pending");
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(workers("pf").empty()) << "a worker pod before the preflight ended";

  end_preflight("pf", 0, report("OK").dump());
  ASSERT_TRUE(eventually([&] { return workers("pf").size() == 2; }));
  const json status = job("pf")["status"];
  EXPECT_EQ(status["preflight"]["verdict"], "OK") << status.dump();
  EXPECT_EQ(status["preflight"]["gpuMemoryGiB"], 80.0);
  EXPECT_EQ(status["preflight"]["gpuMemorySource"], "workers.gpuMemoryGiB");
  EXPECT_EQ(status["preflight"]["report"]["steps"]["total"], 12);
  EXPECT_EQ(status["preflight"]["summary"],
            "12 steps, 24 records, 480 tokens, est. 30.5 GiB per GPU: OK");
  EXPECT_EQ(condition("pf", "PreflightPassed")["status"], "True");
  EXPECT_TRUE(eventually([&] { return has_event("pf", "PreflightPassed"); }));
  expect_status_matches_schema("pf");

  // A gang restart does not run the preflight again: the spec it checked is the same.
  run_all("pf", 2);
  ASSERT_TRUE(wait_phase("pf", "Running"));
  exit_pod("pf-worker-1", 137);
  ASSERT_TRUE(eventually([&] {
    auto ws = workers("pf");
    return ws.size() == 2 && ws[0]["metadata"]["labels"]["kubetune.io/attempt"] == "1";
  }));
  EXPECT_EQ(preflight_status("pf")["verdict"], "OK");
}

TEST_F(PreflightTest, BadLineFailsTheJobWithItsNumberBeforeAnyGpuPod) {
  start_operator();
  create("bad");
  ASSERT_TRUE(eventually([&] { return pods("bad").size() == 1; }));
  end_preflight("bad", 2,
                report("DatasetInvalid",
                       "1 invalid record(s); first: /data/train.jsonl:9731: 'messages' must be a "
                       "list")
                    .dump());
  ASSERT_TRUE(wait_phase("bad", "Failed"));
  const json failed = condition("bad", "Failed");
  EXPECT_EQ(failed["reason"], "DatasetInvalid");
  EXPECT_NE(failed["message"].get<std::string>().find("train.jsonl:9731"), std::string::npos)
      << failed.dump();
  EXPECT_EQ(condition("bad", "PreflightPassed")["reason"], "DatasetInvalid");
  EXPECT_EQ(preflight_status("bad")["verdict"], "DatasetInvalid");
  EXPECT_TRUE(eventually([&] { return has_event("bad", "DatasetInvalid"); }));
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(workers("bad").empty());
  EXPECT_EQ(pods("bad").size(), 1u) << "the finished preflight pod stays for its logs";
  expect_status_matches_schema("bad");
}

// spec.sources.credentialsSecret names a Secret that does not exist: the kubelet cannot start the
// preflight pod's fetch container (CreateContainerConfigError). The job fails at once, naming the
// Secret as the kubelet does, and no worker pod (no GPU) is ever created.
TEST_F(PreflightTest, AMissingCredentialsSecretFailsTheJobBeforeAnyGpuPod) {
  start_operator();
  create("nosecret", [](json& o) {
    o["spec"]["model"]["path"] = "hf://org/model";
    o["spec"]["sources"]["credentialsSecret"] = "hub-token";
  });
  ASSERT_TRUE(eventually([&] { return pods("nosecret").size() == 1; }));
  const json pod = preflight_pod("nosecret");
  ASSERT_EQ(pod["spec"]["initContainers"][0]["name"], "fetch") << pod.dump();
  set_pod_status("nosecret-preflight",
                 fetch_container_status({{"waiting",
                                          {{"reason", "CreateContainerConfigError"},
                                           {"message", "secret \"hub-token\" not found"}}}}));
  ASSERT_TRUE(wait_phase("nosecret", "Failed"));
  const json failed = condition("nosecret", "Failed");
  EXPECT_EQ(failed["reason"], "SourceUnavailable");
  EXPECT_NE(failed["message"].get<std::string>().find("secret \"hub-token\" not found"),
            std::string::npos)
      << failed.dump();
  EXPECT_NE(failed["message"].get<std::string>().find("spec.sources.credentialsSecret"),
            std::string::npos);
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_TRUE(workers("nosecret").empty());
  expect_status_matches_schema("nosecret");
}

TEST_F(PreflightTest, GpuMemoryComesFromNodeLabelsAndTooBigDoesNotFit) {
  // GPU feature discovery's labels: one GPU's memory in MiB. The job may only use the L4 pool.
  for (auto [name, pool, mib] :
       {std::tuple{"h100-a", "h100", "81559"}, std::tuple{"l4-a", "l4", "23034"},
        std::tuple{"l4-b", "l4", "24576"}}) {
    json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata",
                  {{"name", name}, {"labels", {{"pool", pool}, {"nvidia.com/gpu.memory", mib}}}}}};
    ASSERT_EQ(server->call("POST", "/api/v1/nodes", node).code, 201);
  }
  start_operator();
  create("big", [](json& o) { o["spec"]["workers"]["nodeSelector"] = {{"pool", "l4"}}; });
  ASSERT_TRUE(eventually([&] { return pods("big").size() == 1; }));
  const auto cmd = command(preflight_pod("big"));
  EXPECT_TRUE(has_args(cmd, "--gpu-memory-gib", "22.4941")) << json(cmd).dump();
  EXPECT_EQ(preflight_pod("big")["spec"]["nodeSelector"]["pool"], "l4");
  ASSERT_TRUE(eventually([&] { return preflight_status("big").contains("gpuMemoryGiB"); }));
  EXPECT_EQ(preflight_status("big")["gpuMemorySource"], "nvidia.com/gpu.memory of 2 node(s)");

  end_preflight(
      "big", 2,
      report("DoesNotFit", "estimated peak memory 30.5 GiB per GPU, more than the GPU's 22.5 GiB")
          .dump());
  ASSERT_TRUE(wait_phase("big", "Failed"));
  EXPECT_EQ(condition("big", "Failed")["reason"], "DoesNotFit");
  EXPECT_NE(condition("big", "Failed")["message"].get<std::string>().find("22.5 GiB"),
            std::string::npos);
  EXPECT_TRUE(workers("big").empty());
}

TEST_F(PreflightTest, EndedWithoutAVerdictIsTriedAgainUpToTheBackoffLimit) {
  start_operator();
  create("oom");  // backoffLimit 2
  ASSERT_TRUE(eventually([&] { return pods("oom").size() == 1; }));
  const json first_uid = preflight_pod("oom")["metadata"]["uid"];
  end_preflight("oom", 137, "", "OOMKilled");
  ASSERT_TRUE(eventually([&] {
    // Between the old pod's deletion and the new one's creation this is a 404 Status, whose
    // metadata has no uid: read with value(), not a const operator[] of a key that is not there.
    const json p = preflight_pod("oom");
    const json meta = p.value("metadata", json::object());
    return meta.value("uid", json()) != first_uid &&
           meta.value("labels", json::object()).value("kubetune.io/attempt", "") == "1";
  }));
  EXPECT_EQ(preflight_status("oom")["failures"], 1);
  EXPECT_TRUE(eventually([&] { return has_event("oom", "PreflightRetry"); }));
  EXPECT_TRUE(workers("oom").empty());

  // The trainer died before its report: its last log lines are the message (FallbackToLogs).
  end_preflight("oom", 2, "error: cannot open /data/models/x/config.json");
  ASSERT_TRUE(wait_phase("oom", "Failed"));
  EXPECT_EQ(condition("oom", "Failed")["reason"], "InputInvalid");
  EXPECT_NE(condition("oom", "Failed")["message"].get<std::string>().find("cannot open"),
            std::string::npos);
}

TEST_F(PreflightTest, AReportOfTheWrongShapeIsNotTrusted) {
  // Anything in the pod can write its termination message.
  start_operator();
  create("odd");
  ASSERT_TRUE(eventually([&] { return pods("odd").size() == 1; }));
  const std::string odd =
      R"({"verdict": ["x"], "message": null, "data": {"train": 7}, "memory": "big",
          "steps": {"total": "many"}})";
  end_preflight("odd", 2, odd);
  ASSERT_TRUE(wait_phase("odd", "Failed"));
  EXPECT_EQ(condition("odd", "Failed")["reason"], "InputInvalid");
  // Not the schema's report (api::PreflightReport): kept as text, not as a report.
  EXPECT_EQ(preflight_status("odd")["summary"], odd);
  EXPECT_FALSE(preflight_status("odd").contains("report")) << preflight_status("odd").dump();
  expect_status_matches_schema("odd");
}

TEST_F(PreflightTest, RepeatedFailuresWithoutAVerdictFailTheJob) {
  start_operator();
  create("evicted", [](json& o) { o["spec"]["runPolicy"]["backoffLimit"] = 0; });
  ASSERT_TRUE(eventually([&] { return pods("evicted").size() == 1; }));
  set_pod_status("evicted-preflight", {{"phase", "Failed"}, {"reason", "Evicted"}});
  ASSERT_TRUE(wait_phase("evicted", "Failed"));
  const json failed = condition("evicted", "Failed");
  EXPECT_EQ(failed["reason"], "PreflightFailed");
  EXPECT_NE(failed["message"].get<std::string>().find("Evicted"), std::string::npos);
  EXPECT_NE(failed["message"].get<std::string>().find("runPolicy.preflight: false"),
            std::string::npos);
}

}  // namespace
}  // namespace kubetune::op::testing
