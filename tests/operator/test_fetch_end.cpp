// A fetch container's end, read and classified once for every pod kind (policy/fetch_end.h): the
// exit codes are kubetune-fetch's, which are common/contracts.h's.
#include <gtest/gtest.h>

#include "common/contracts.h"
#include "operator/policy/fetch_end.h"
#include "operator/policy/gang.h"
#include "operator/policy/outputs.h"
#include "test_support.h"

namespace kubetune::op {
namespace {

using nlohmann::json;

// A pod whose fetch init container is in `state` (the kubelet's ContainerState).
k8s::Pod pod_with_fetch(const json& state, const std::string& phase = "Pending") {
  return json{{"metadata", {{"name", "j-worker-1"}, {"labels", {{kLabelRank, "1"}}}}},
              {"status", testing::fetch_container_status(state, phase)}}
      .get<k8s::Pod>();
}

json terminated(int code, const std::string& reason, const std::string& message) {
  return {{"terminated", {{"exitCode", code}, {"reason", reason}, {"message", message}}}};
}

TEST(FetchExit, ASourceThatCannotBeFetchedIsPermanentAndEveryOtherEndIsRetried) {
  const FetchExit user = classify_fetch_exit(kExitUserError, "Error");
  EXPECT_EQ(user.reason, Reason::kSourceUnavailable);
  EXPECT_TRUE(user.permanent);
  const FetchExit network = classify_fetch_exit(kExitRetryable, "Error");
  EXPECT_EQ(network.reason, Reason::kWorkerFailed);
  EXPECT_FALSE(network.permanent);
  for (int code : {1, 137}) EXPECT_FALSE(classify_fetch_exit(code, "Error").permanent) << code;
  const FetchExit oom = classify_fetch_exit(kExitUserError, "OOMKilled");
  EXPECT_EQ(oom.reason, Reason::kOOMKilled);
  EXPECT_FALSE(oom.permanent);
}

TEST(FetchEnd, ReadsRunningResultsAndTheLastLineOfAnError) {
  const FetchEnd running = read_fetch_end(pod_with_fetch({{"running", json::object()}}));
  EXPECT_TRUE(running.running);
  EXPECT_FALSE(running.exit_code);

  const FetchEnd ok = read_fetch_end(pod_with_fetch(terminated(0, "Completed", "[{\"a\": 1}]")));
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_FALSE(ok.failed());
  EXPECT_EQ(ok.results, "[{\"a\": 1}]");

  const FetchEnd failed = read_fetch_end(pod_with_fetch(terminated(
      kExitUserError, "Error", "fetching...\nkubetune-fetch: error: hf://x/y: not found\n\n")));
  EXPECT_TRUE(failed.failed());
  EXPECT_FALSE(failed.running);
  EXPECT_EQ(failed.error, "kubetune-fetch: error: hf://x/y: not found");
  EXPECT_TRUE(failed.results.empty());

  const FetchEnd long_line =
      read_fetch_end(pod_with_fetch(terminated(kExitRetryable, "Error", std::string(2000, 'x'))));
  EXPECT_EQ(long_line.error.size(), kFetchErrorChars);

  EXPECT_FALSE(read_fetch_end(json{{"metadata", {{"name", "p"}}}}.get<k8s::Pod>()).exit_code);
}

// The same exit as the preflight pod's: a worker whose pinned fetch cannot read its source fails
// the job with SourceUnavailable (no longer ConfigError, the trainer's reason).
TEST(FetchEnd, AWorkersFetchIsClassifiedAsThePreflightPods) {
  const auto f = pod_failure(
      pod_with_fetch(terminated(kExitUserError, "Error", "hf://x/y: revision abc is gone"),
                     "Failed"),
      1);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, classify_fetch_exit(kExitUserError, "Error").reason);
  EXPECT_EQ(f->reason, Reason::kSourceUnavailable);
  EXPECT_TRUE(f->permanent);
  EXPECT_NE(f->message.find("hf://x/y: revision abc is gone"), std::string::npos) << f->message;

  const auto retried = pod_failure(
      pod_with_fetch(terminated(kExitRetryable, "Error", "connection reset"), "Failed"), 1);
  ASSERT_TRUE(retried);
  EXPECT_EQ(retried->reason, Reason::kWorkerFailed);
  EXPECT_FALSE(retried->permanent);
}

// A Secret named by spec.sources.credentialsSecret that does not exist: the kubelet cannot start
// the fetch container and says so (CreateContainerConfigError); the pod would wait forever. A
// worker in that state fails the job at once, as a source that cannot be fetched does, naming
// the Secret as the kubelet does.
TEST(FetchEnd, AMissingCredentialsSecretFailsAWorkerAtOnce) {
  const json waiting = {
      {"waiting",
       {{"reason", "CreateContainerConfigError"}, {"message", "secret \"hub-and-s3\" not found"}}}};
  EXPECT_EQ(read_fetch_end(pod_with_fetch(waiting)).cannot_start,
            "secret \"hub-and-s3\" not found");
  const auto f = pod_failure(pod_with_fetch(waiting), 1);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->reason, Reason::kSourceUnavailable);
  EXPECT_TRUE(f->permanent);
  EXPECT_NE(f->message.find("worker 1 (pod j-worker-1): its fetch container cannot start: secret "
                            "\"hub-and-s3\" not found"),
            std::string::npos)
      << f->message;
  EXPECT_NE(f->message.find("spec.sources.credentialsSecret"), std::string::npos) << f->message;

  // Waiting for any other reason (its image being pulled) is not a failure.
  const json pulling = {{"waiting", {{"reason", "PodInitializing"}}}};
  EXPECT_TRUE(read_fetch_end(pod_with_fetch(pulling)).cannot_start.empty());
  EXPECT_FALSE(pod_failure(pod_with_fetch(pulling), 1));
}

// status.outputs: what rank 0's publish container reported, else the folders the spec names.
TEST(FetchEnd, OutputsAreWhatThePublisherReportedElseTheSpecsFolders) {
  api::TrainConfig config;
  config.output.dir = "s3://b/run";
  config.output.save_merged = true;
  const json report =
      json::array({{{"name", "adapter"}, {"uri", "s3://b/run/"}},
                   {{"name", "gguf-q8_0"}, {"uri", "s3://b/run/gguf/model-q8_0.gguf"}}});
  json pod = {{"metadata", {{"name", "j-worker-0"}}},
              {"status",
               {{"phase", "Succeeded"},
                {"containerStatuses",
                 {{{"name", "trainer"}, {"state", {{"terminated", {{"exitCode", 0}}}}}},
                  {{"name", "publish"},
                   {"state", {{"terminated", {{"exitCode", 0}, {"message", report.dump()}}}}}}}}}}};
  const auto published = job_outputs(config, pod.get<k8s::Pod>());
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[1].name, "gguf-q8_0");
  EXPECT_EQ(published[1].uri, "s3://b/run/gguf/model-q8_0.gguf");

  config.output.dir = "/runs/a";
  const auto local = job_outputs(config, std::nullopt);
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[0].name, "adapter");
  EXPECT_EQ(local[0].uri, "/runs/a");
  EXPECT_EQ(local[1].uri, "/runs/a/merged");
  // Anything else in the termination message is not trusted.
  pod["status"]["containerStatuses"][1]["state"]["terminated"]["message"] = "not json";
  EXPECT_EQ(job_outputs(config, pod.get<k8s::Pod>()).size(), 2u);
  config.method.type = api::MethodType::kFull;
  EXPECT_EQ(job_outputs(config, std::nullopt).at(0).name, "model");
}

}  // namespace
}  // namespace kubetune::op
