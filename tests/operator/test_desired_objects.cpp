// desired_objects(): what a FineTuneJob becomes, checked without any API server.
#include <gtest/gtest.h>

#include "common/contracts.h"
#include "common/train_config.h"
#include "common/yaml_file.h"
#include "operator/render/desired_objects.h"
#include "test_support.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

FineTuneJob example(const std::string& file, const std::string& uid = "uid-1") {
  json obj = load_yaml_or_json_file(testing::source_dir() + "/examples/jobs/" + file);
  obj["metadata"]["namespace"] = obj["metadata"].value("namespace", "team-a");
  obj["metadata"]["uid"] = uid;
  return parse_job(obj);
}

json env_value(const json& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (e["name"] == name) return e.contains("value") ? e["value"] : e["valueFrom"];
  }
  return nullptr;
}

json arg_after(const json& command, const std::string& flag) {
  for (size_t i = 0; i + 1 < command.size(); ++i) {
    if (command[i] == flag) return command[i + 1];
  }
  return nullptr;
}

TEST(DesiredObjects, OnePodPerNodeWithTheTorchrunEnvironment) {
  const FineTuneJob job = example("full-multinode.yaml");
  const DesiredObjects d = desired_objects(job, 3);
  ASSERT_EQ(d.pods.size(), 2u);
  const std::string master = "llama-full-sft-worker-0.llama-full-sft.team-a.svc";
  for (int rank = 0; rank < 2; ++rank) {
    const json pod = d.pods[rank];
    EXPECT_EQ(pod["metadata"]["name"], "llama-full-sft-worker-" + std::to_string(rank));
    EXPECT_EQ(pod["metadata"]["labels"][kLabelRank], std::to_string(rank));
    EXPECT_EQ(pod["metadata"]["labels"][kLabelAttempt], "3");
    EXPECT_EQ(pod["metadata"]["labels"][kLabelJob], "llama-full-sft");
    EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
    // The schema's default: time to finish the step and checkpoint after a drain's SIGTERM.
    EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 600);
    EXPECT_EQ(pod["spec"]["subdomain"], "llama-full-sft");
    EXPECT_EQ(pod["spec"]["hostname"], pod["metadata"]["name"]);
    const json& c = pod["spec"]["containers"][0];
    EXPECT_EQ(c["command"][0], "kubetune-trainer");
    EXPECT_EQ(c["command"][1], "launch");
    // The launch contract is the environment only (common/launch_contract.h), said once.
    EXPECT_EQ(c["command"][2], "--");
    EXPECT_EQ(arg_after(c["command"], "--config"), "/etc/kubetune/config.json");
    EXPECT_EQ(env_value(c, "NPROC_PER_NODE"), "8");
    EXPECT_EQ(env_value(c, "NNODES"), "2");
    EXPECT_EQ(env_value(c, "NODE_RANK"), std::to_string(rank));
    EXPECT_EQ(env_value(c, "MASTER_ADDR"), master);
    EXPECT_EQ(env_value(c, "MASTER_PORT"), "29500");
    for (const auto& e : c["env"]) EXPECT_NE(e["name"], "KUBETUNE_JOB_NAME") << "never read";
    EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], 8);
    EXPECT_EQ(c["resources"]["limits"]["memory"], "900Gi");
    EXPECT_EQ(c["resources"]["requests"]["cpu"], 64);
    EXPECT_EQ(pod["spec"]["priorityClassName"], "training");
    EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "nvidia.com/gpu");
    EXPECT_EQ(pod["spec"]["nodeSelector"]["nvidia.com/gpu.product"], "NVIDIA-H100-80GB-HBM3");
  }
}

TEST(DesiredObjects, OwnedByTheJobSoDeletionCascades) {
  const FineTuneJob job = example("full-multinode.yaml", "abc-123");
  const DesiredObjects d = desired_objects(job, 0);
  ASSERT_TRUE(d.service);
  const std::vector<json> objects = {d.config_map, *d.service, d.pods[0], d.pods[1]};
  for (const json& obj : objects) {
    const json& ref = obj["metadata"]["ownerReferences"][0];
    EXPECT_EQ(ref["uid"], "abc-123");
    EXPECT_EQ(ref["kind"], "FineTuneJob");
    EXPECT_EQ(ref["apiVersion"], "kubetune.io/v1alpha1");
    EXPECT_EQ(ref["controller"], true);
    EXPECT_EQ(ref["blockOwnerDeletion"], true);
    EXPECT_EQ(obj["metadata"]["labels"][kLabelManagedBy], kManagerName);
  }
}

TEST(DesiredObjects, WorkersRunUnprivilegedByDefault) {
  const json pod = desired_objects(example("lora-single-gpu.yaml"), 0).pods[0];
  const json& s = pod["spec"]["securityContext"];
  EXPECT_EQ(s["runAsNonRoot"], true);
  EXPECT_EQ(s["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(s["fsGroup"], 65532);
  EXPECT_EQ(s["fsGroupChangePolicy"], "OnRootMismatch");
  EXPECT_FALSE(s.contains("runAsUser"));
  const json& c = pod["spec"]["containers"][0]["securityContext"];
  EXPECT_EQ(c["allowPrivilegeEscalation"], false);
  EXPECT_EQ(c["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_FALSE(c["capabilities"].contains("add"));
}

TEST(DesiredObjects, SecurityContextFromTheSpec) {
  json obj = load_yaml_or_json_file(testing::source_dir() + "/examples/jobs/lora-single-gpu.yaml");
  obj["metadata"]["namespace"] = "team-a";
  obj["metadata"]["uid"] = "uid-1";
  obj["spec"]["workers"]["securityContext"] = {{"runAsNonRoot", false},
                                               {"runAsUser", 1000},
                                               {"runAsGroup", 1000},
                                               {"fsGroup", 2000},
                                               {"addCapabilities", {"IPC_LOCK"}}};
  obj["spec"]["workers"]["annotations"] = {{"sidecar.istio.io/inject", "false"}};
  const json pod = desired_objects(parse_job(obj), 0).pods[0];
  EXPECT_EQ(pod["metadata"]["annotations"]["sidecar.istio.io/inject"], "false");
  EXPECT_TRUE(pod["metadata"]["annotations"].contains("kubetune.io/spec-hash"));
  const json& s = pod["spec"]["securityContext"];
  EXPECT_EQ(s["runAsNonRoot"], false);
  EXPECT_EQ(s["runAsUser"], 1000);
  EXPECT_EQ(s["runAsGroup"], 1000);
  EXPECT_EQ(s["fsGroup"], 2000);
  EXPECT_EQ(pod["spec"]["containers"][0]["securityContext"]["capabilities"]["add"],
            json::array({"IPC_LOCK"}));
}

TEST(DesiredObjects, MountsConfigShmAndVolumes) {
  const FineTuneJob job = example("full-multinode.yaml");
  const json pod = desired_objects(job, 0).pods[0];
  std::map<std::string, json> volumes, mounts;
  for (const auto& v : pod["spec"]["volumes"]) volumes[v["name"]] = v;
  for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"]) mounts[m["name"]] = m;
  EXPECT_EQ(volumes["kubetune-shm"]["emptyDir"]["medium"], "Memory");
  EXPECT_EQ(volumes["kubetune-shm"]["emptyDir"]["sizeLimit"], "64Gi");
  EXPECT_EQ(mounts["kubetune-shm"]["mountPath"], "/dev/shm");
  EXPECT_EQ(volumes["kubetune-config"]["configMap"]["name"], "llama-full-sft-config");
  EXPECT_EQ(mounts["kubetune-config"]["mountPath"], "/etc/kubetune");
  EXPECT_EQ(volumes["models"]["persistentVolumeClaim"]["claimName"], "model-store");
  EXPECT_EQ(volumes["models"]["persistentVolumeClaim"]["readOnly"], true);
  EXPECT_EQ(mounts["models"]["mountPath"], "/models");
  EXPECT_EQ(mounts["data"]["mountPath"], "/data");
}

TEST(DesiredObjects, ConfigMapHoldsTheValidatedTrainerConfig) {
  const FineTuneJob job = example("lora-single-gpu.yaml");
  const DesiredObjects d = desired_objects(job, 0);
  const json config = json::parse(d.config_map.data.at("config.json"));
  // Exactly what the trainer's own validator makes of the training part (defaults included).
  EXPECT_EQ(config, job.train_config);
  EXPECT_NO_THROW(validate_train_config(config));
  EXPECT_FALSE(config.contains("workers"));
  EXPECT_FALSE(config.contains("volumes"));
  EXPECT_EQ(config["metrics"]["jobName"], "llama-lora-chat");
  EXPECT_EQ(config["checkpoint"]["resume"], "auto");
}

TEST(DesiredObjects, HeadlessServiceForRendezvous) {
  const FineTuneJob job = example("full-multinode.yaml");
  const auto service = desired_objects(job, 0).service;
  ASSERT_TRUE(service);
  const json svc = *service;
  EXPECT_EQ(svc["metadata"]["name"], "llama-full-sft");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_EQ(svc["spec"]["selector"][kLabelJob], "llama-full-sft");
}

// One pod's processes meet on 127.0.0.1: no Service to create, watch or collect.
TEST(DesiredObjects, AGangOfOnePodHasNoService) {
  const FineTuneJob job = example("lora-single-gpu.yaml");
  const DesiredObjects d = desired_objects(job, 0);
  EXPECT_FALSE(d.service);
  ASSERT_EQ(d.pods.size(), 1u);
  const k8s::Pod pod = d.pods[0];
  EXPECT_FALSE(pod.spec.subdomain);
  EXPECT_EQ(env_value(pod.spec.containers.at(0), "MASTER_ADDR"), "127.0.0.1");
}

TEST(DesiredObjects, CpuWorkersHaveNoGpuLimitAndOneProcess) {
  const FineTuneJob job = example("lora-cpu-hostpath.yaml");
  // Typed: a container that asks for no resource at all has no "resources" member to index.
  const k8s::Pod pod = desired_objects(job, 0).pods[0];
  const k8s::Container& c = pod.spec.containers.at(0);
  EXPECT_EQ(c.resources.limits.count("nvidia.com/gpu"), 0u);
  EXPECT_EQ(env_value(c, "NPROC_PER_NODE"), "1");
  ASSERT_TRUE(pod.spec.volumes.at(2).host_path);
  EXPECT_EQ(pod.spec.volumes.at(2).host_path->path, "/srv/kubetune");
}

// An s3:// output.dir: every worker writes to a staging emptyDir; rank 0's publish container,
// beside its trainer, makes the GGUF files and uploads the folder with the job's credentials.
TEST(DesiredObjects, AnS3OutputIsStagedAndPublishedByRankZero) {
  json obj =
      load_yaml_or_json_file(testing::source_dir() + "/examples/jobs/sft-to-s3-with-gguf.yaml");
  obj["metadata"]["namespace"] = "team-a";
  obj["metadata"]["uid"] = "uid-1";
  obj["spec"]["workers"]["replicas"] = 2;
  const FineTuneJob job = parse_job(obj);
  const DesiredObjects d = desired_objects(job, 0);
  const json config = json::parse(d.config_map.data.at("config.json"));
  EXPECT_EQ(config["output"]["dir"], "/kubetune/output");
  EXPECT_NO_THROW(validate_train_config(config));

  const json rank0 = d.pods[0], rank1 = d.pods[1];
  ASSERT_EQ(rank0["spec"]["containers"].size(), 2u);
  ASSERT_EQ(rank1["spec"]["containers"].size(), 1u);  // rank 0 alone writes the outputs
  const json trainer = rank0["spec"]["containers"][0], publish = rank0["spec"]["containers"][1];
  EXPECT_EQ(publish["name"], "publish");
  EXPECT_EQ(publish["image"], "ghcr.io/kubetune/export:0.1.0");  // output.gguf: llama.cpp's tools
  EXPECT_EQ(publish["command"], json({"kubetune-fetch"}));
  EXPECT_EQ(publish["args"], json({"publish", "/kubetune/output", "--gguf", "q8_0", "--gguf",
                                   "q4_k_m", "--to", "s3://my-team-models/qwen3-8b-support/v1",
                                   "--wait-for-trainer", "--results", "/dev/termination-log"}));
  EXPECT_EQ(publish["envFrom"][0]["secretRef"]["name"], "hub-and-s3");
  EXPECT_FALSE(trainer.contains("envFrom"));  // the credentials reach kubetune-fetch only
  EXPECT_FALSE(publish["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_EQ(publish["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_EQ(publish["terminationMessagePolicy"], "FallbackToLogsOnError");
  auto mount_of = [](const json& container, const std::string& volume) {
    for (const auto& m : container["volumeMounts"])
      if (m["name"] == volume) return m["mountPath"];
    return json();
  };
  for (const json& c : {trainer, publish, rank1["spec"]["containers"][0]})
    EXPECT_EQ(mount_of(c, "kubetune-output"), "/kubetune/output") << c["name"];
  EXPECT_EQ(mount_of(publish, "runs"), "/runs");  // the checkpoints' volume, as the trainer's
  EXPECT_TRUE(mount_of(publish, "kubetune-config").is_null());

  // A job without s3:// output or GGUF files has neither.
  const json plain = desired_objects(example("lora-single-gpu.yaml"), 0).pods[0];
  EXPECT_EQ(plain["spec"]["containers"].size(), 1u);
  EXPECT_TRUE(mount_of(plain["spec"]["containers"][0], "kubetune-output").is_null());
}

// An s3:// checkpoint.dir: the trainer writes to a folder of the pod; the worker's fetch restores
// the newest checkpoint there first, and the publish container uploads each one as it appears.
TEST(DesiredObjects, S3CheckpointsAreRestoredBeforeAndSyncedBeside) {
  json obj = load_yaml_or_json_file(testing::source_dir() + "/examples/jobs/lora-single-gpu.yaml");
  obj["metadata"]["namespace"] = "team-a";
  obj["metadata"]["uid"] = "uid-1";
  obj["spec"]["checkpoint"]["dir"] = "s3://ck-bucket/llama";
  const FineTuneJob job = parse_job(obj);
  const DesiredObjects d = desired_objects(job, 0);
  const json config = json::parse(d.config_map.data.at("config.json"));
  EXPECT_EQ(config["checkpoint"]["dir"], "/kubetune/checkpoints");
  EXPECT_EQ(config["output"]["dir"], job.spec.output.dir);  // the output stays on its volume
  const json pod = d.pods[0];
  ASSERT_EQ(pod["spec"]["initContainers"].size(), 1u);
  const json fetch = pod["spec"]["initContainers"][0];
  EXPECT_EQ(arg_after(fetch["args"], "--restore-checkpoint"),
            "s3://ck-bucket/llama=/kubetune/checkpoints");
  ASSERT_EQ(pod["spec"]["containers"].size(), 2u);
  const json publish = pod["spec"]["containers"][1];
  EXPECT_EQ(publish["image"], "ghcr.io/kubetune/fetch:0.1.0");  // no GGUF: the fetch image
  EXPECT_EQ(arg_after(publish["args"], "--sync-checkpoints"), "/kubetune/checkpoints");
  EXPECT_EQ(arg_after(publish["args"], "--checkpoints-to"), "s3://ck-bucket/llama");
  EXPECT_EQ(arg_after(publish["args"], "--keep-last"), "2");
  EXPECT_TRUE(arg_after(publish["args"], "--to").is_null());
  for (const json& c : {fetch, pod["spec"]["containers"][0], publish}) {
    bool mounted = false;
    for (const auto& m : c["volumeMounts"])
      mounted |= m["name"] == "kubetune-checkpoints" && m["mountPath"] == "/kubetune/checkpoints";
    EXPECT_TRUE(mounted) << c["name"];
  }
  // The preflight reads no checkpoint: it has no fetch container for one.
  const json preflight = preflight_pod(job, std::nullopt, 0);
  EXPECT_FALSE(preflight["spec"].contains("initContainers"));
}

}  // namespace
}  // namespace kubetune::op
