// A FakeApiServer with the FineTuneJob resource, an operator (Manager) against it with fast
// timings, and helpers that play the user (create/patch jobs) and the kubelet (pod phases).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/schema_validator.h"
#include "common/train_config.h"
#include "common/yaml_file.h"
#include "kubetune/kubefake/fake_api_server.h"
#include "operator/api/crd.h"
#include "operator/runtime/manager.h"
#include "test_support.h"

namespace kubetune::op::testing {

using nlohmann::json;
using std::chrono::milliseconds;

class OperatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server = std::make_unique<kubefake::FakeApiServer>();
    server->register_resource(
        {"kubetune.io", "v1alpha1", "finetunejobs", "FineTuneJob", true, true});
    server->set_bookmark_interval(milliseconds(100));
  }
  void TearDown() override {
    for (auto& m : managers) m->stop();
    managers.clear();
  }

  ManagerOptions options(bool leader_elect = false, const std::string& identity = "op-a") {
    ManagerOptions o;
    o.workers = 2;
    o.leader_elect = leader_elect;
    o.leader.identity = identity;
    o.leader.lease_namespace = "kubetune-system";
    o.leader.lease_duration = milliseconds(1000);
    o.leader.renew_deadline = milliseconds(800);
    o.leader.retry_period = milliseconds(100);
    o.http_address = "127.0.0.1";
    o.http_port = 0;
    o.reconciler.progress_period = milliseconds(200);
    o.reconciler.scrape_timeout_ms = 500;
    o.informer.min_backoff = milliseconds(50);
    o.informer.max_backoff = milliseconds(500);
    o.queue_max_delay = milliseconds(2000);
    return o;
  }

  Manager& start_operator(ManagerOptions o) {
    kube::ClientConfig c;
    c.server = server->url();
    managers.push_back(std::make_unique<Manager>(c, o));
    managers.back()->start();
    return *managers.back();
  }
  Manager& start_operator() { return start_operator(options()); }

  static std::string jobs_path(const std::string& name = "") {
    return "/apis/kubetune.io/v1alpha1/namespaces/default/finetunejobs" +
           (name.empty() ? "" : "/" + name);
  }
  static std::string pod_path(const std::string& name) {
    return "/api/v1/namespaces/default/pods/" + name;
  }

  // A two-worker LoRA job on a PVC, without the preflight pod (test_controller_preflight.cpp
  // plays that); `mutate` adjusts the spec.
  json create_job(const std::string& name, const std::function<void(json&)>& mutate = {}) {
    json obj = load_yaml_or_json_file(source_dir() + "/examples/jobs/lora-single-gpu.yaml");
    obj["metadata"] = {{"name", name}, {"namespace", "default"}};
    obj["spec"]["workers"]["replicas"] = 2;
    obj["spec"]["metrics"]["port"] = 0;
    obj["spec"]["runPolicy"] = {{"backoffLimit", 2}, {"preflight", false}};
    if (mutate) mutate(obj);
    auto r = server->call("POST", jobs_path(), obj);
    EXPECT_EQ(r.code, 201) << r.body.dump();
    return r.body;
  }

  json job(const std::string& name) { return server->get(jobs_path(name)); }
  std::string phase(const std::string& name) {
    return job(name).value("status", json::object()).value("phase", "");
  }
  json condition(const std::string& name, const std::string& type) {
    const json status = job(name).value("status", json::object());
    for (const auto& c : status.value("conditions", json::array())) {
      if (c["type"] == type) return c;
    }
    return nullptr;
  }
  std::vector<json> pods(const std::string& job_name) {
    auto r = server->call(
        "GET",
        "/api/v1/namespaces/default/pods?labelSelector=kubetune.io%2Fjob-name%3D" + job_name);
    return r.body.value("items", json::array()).get<std::vector<json>>();
  }
  bool has_event(const std::string& job_name, const std::string& reason) {
    auto r = server->call("GET", "/api/v1/namespaces/default/events");
    for (const auto& e : r.body.value("items", json::array())) {
      if (e["involvedObject"]["name"] == job_name && e["reason"] == reason) return true;
    }
    return false;
  }
  bool wait_phase(const std::string& name, const std::string& want,
                  milliseconds timeout = milliseconds(10000)) {
    return eventually([&] { return phase(name) == want; }, timeout);
  }
  bool wait_pods(const std::string& name, size_t n, const std::string& attempt = "") {
    return eventually([&] {
      auto ps = pods(name);
      if (ps.size() != n) return false;
      for (const auto& p : ps) {
        if (!attempt.empty() && p["metadata"]["labels"]["kubetune.io/attempt"] != attempt) {
          return false;
        }
      }
      return true;
    });
  }

  // The kubelet's part.
  void set_pod_status(const std::string& pod, const json& status) {
    auto r = server->call("PATCH", pod_path(pod) + "/status", {{"status", status}},
                          "application/merge-patch+json");
    ASSERT_EQ(r.code, 200) << r.body.dump();
  }
  void run_pod(const std::string& pod) {
    set_pod_status(pod, {{"phase", "Running"}, {"podIP", "127.0.0.1"}});
  }
  void exit_pod(const std::string& pod, int code, const std::string& reason = "") {
    set_pod_status(
        pod, {{"phase", code == 0 ? "Succeeded" : "Failed"},
              {"containerStatuses",
               {{{"name", "trainer"},
                 {"state",
                  {{"terminated",
                    {{"exitCode", code}, {"reason", reason.empty() ? "Error" : reason}}}}}}}}});
  }
  void run_all(const std::string& job_name, int n) {
    for (int i = 0; i < n; ++i) run_pod(job_name + "-worker-" + std::to_string(i));
  }

  // What the operator wrote must survive the API server's pruning: no field outside the schema.
  void expect_status_matches_schema(const std::string& name) {
    json status = job(name)["status"];
    std::vector<std::string> problems;
    validate_against_schema(status_schema(), status, "status", {}, problems);
    for (const auto& p : problems) ADD_FAILURE() << p;
  }

  std::unique_ptr<kubefake::FakeApiServer> server;
  std::vector<std::unique_ptr<Manager>> managers;
};

}  // namespace kubetune::op::testing
