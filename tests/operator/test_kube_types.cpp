// The generated Kubernetes types (operator/kube/kube_types.h, from the API server's OpenAPI
// documents): what they read is what they write, fields they do not name included, so an object the
// operator updates keeps what the API server, the kubelet or Kueue put there.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "operator/kube/kube_types.h"
#include "operator/render/workload.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// A pod as kube-apiserver v1.28 returns it, with members the list does not name at every level
// (managedFields, a probe, hostIP, a condition's times) and one no schema has yet.
const json kPod = json::parse(R"({
  "apiVersion": "v1", "kind": "Pod",
  "metadata": {"name": "j-worker-0", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
               "labels": {"kubetune.io/rank": "0"},
               "managedFields": [{"manager": "kubetune-operator", "operation": "Update"}]},
  "spec": {"restartPolicy": "Never", "dnsPolicy": "ClusterFirst",
           "containers": [{"name": "trainer", "image": "kubetune:1",
                           "livenessProbe": {"exec": {"command": ["true"]}},
                           "resources": {"limits": {"nvidia.com/gpu": "8", "cpu": 4}}}],
           "futureField": {"x": 1}},
  "status": {"phase": "Failed", "hostIP": "10.0.0.1",
             "conditions": [{"type": "PodScheduled", "status": "True",
                             "lastTransitionTime": "2026-11-26T10:00:00Z"}],
             "containerStatuses": [{"name": "trainer", "ready": false, "restartCount": 0,
                                    "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                              "finishedAt": "2026-11-26T10:05:00Z"}},
                                    "lastState": {}}]}
})");

TEST(KubeTypes, WhatIsReadIsWhatIsWritten) {
  const k8s::Pod pod = kPod.get<k8s::Pod>();
  EXPECT_EQ(json(pod), kPod);
  EXPECT_EQ(pod.metadata.labels.at("kubetune.io/rank"), "0");
  EXPECT_EQ(pod.spec.containers.at(0).resources.limits.at("cpu"), 4);  // a Quantity as given
  EXPECT_EQ(pod.spec.unknown_fields.at("futureField"), json({{"x", 1}}));
}

// Absent is not zero: a container that has not ended has no `terminated`, and one that ended with
// exit code 0 has one.
TEST(KubeTypes, AnAbsentObjectIsNotAnEmptyOne) {
  const k8s::Pod pod = kPod.get<k8s::Pod>();
  const k8s::ContainerStatus& trainer = pod.status.container_statuses.at(0);
  ASSERT_TRUE(trainer.state.terminated.has_value());
  EXPECT_EQ(trainer.state.terminated->exit_code, 0);
  EXPECT_FALSE(trainer.last_state.terminated.has_value());
  EXPECT_FALSE(pod.status.pod_ip.has_value());
  EXPECT_FALSE(json(pod)["status"].contains("podIP"));
}

// A Workload as Kueue writes it: the operator sets its PodsReady condition (as Kueue's own job
// integrations do) and writes the status back. Everything Kueue wrote that the operator's types do
// not name (resourceRequests, schedulingStats, a pod set assignment's usage) is still there.
TEST(KubeTypes, AStatusUpdateKeepsWhatAnotherControllerWrote) {
  const json written_by_kueue = json::parse(R"({
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "finetunejob-j-abcde", "namespace": "ns", "generation": 1},
    "spec": {"queueName": "team-a", "active": true,
             "podSets": [{"name": "workers", "count": 2, "template": {"spec": {"containers": []}}}]},
    "status": {
      "admission": {"clusterQueue": "gpus",
                    "podSetAssignments": [{"name": "workers", "flavors": {"nvidia.com/gpu": "h100"},
                                           "resourceUsage": {"nvidia.com/gpu": "16"},
                                           "count": 2}]},
      "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                      "message": "Quota reserved in ClusterQueue gpus",
                      "lastTransitionTime": "2026-11-26T10:00:00Z", "observedGeneration": 1}],
      "resourceRequests": [{"name": "workers", "resources": {"nvidia.com/gpu": "16"}}],
      "schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1}]}}
  })");
  k8s::Workload workload = written_by_kueue.get<k8s::Workload>();
  kueue::set_workload_condition(workload, "PodsReady", true, "Started", "All pods are running",
                                "2026-11-26T10:01:00Z");
  const json written_back = workload;

  json expected = written_by_kueue;
  expected["status"]["conditions"].push_back({{"type", "PodsReady"},
                                              {"status", "True"},
                                              {"reason", "Started"},
                                              {"message", "All pods are running"},
                                              {"lastTransitionTime", "2026-11-26T10:01:00Z"},
                                              {"observedGeneration", 1}});
  EXPECT_EQ(written_back, expected) << written_back.dump(2);
}

}  // namespace
}  // namespace kubetune::op
