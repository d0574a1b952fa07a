// The status subresource and metadata.generation, on the operator's FineTuneJob custom resource.
#include <gtest/gtest.h>

#include "kubetune/kubefake/fake_api_server.h"
#include "test_client.h"

namespace kubetune::kubefake {
namespace {

using nlohmann::json;
using testing::Reply;
using testing::TestClient;

const std::string kJobs = "/apis/kubetune.io/v1alpha1/namespaces/ns/finetunejobs";

json job(const std::string& name) {
  return {{"apiVersion", "kubetune.io/v1alpha1"},
          {"kind", "FineTuneJob"},
          {"metadata", {{"name", name}}},
          {"spec", {{"model", "tiny"}, {"epochs", 1}}},
          {"status", {{"phase", "Succeeded"}}}};
}

class StatusSubresourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server.register_resource(
        {"kubetune.io", "v1alpha1", "finetunejobs", "FineTuneJob", true, true});
  }
  FakeApiServer server;
  TestClient client{server.url()};
};

TEST_F(StatusSubresourceTest, CreateDropsStatusAndStartsAtGenerationOne) {
  Reply created = client.post(kJobs, job("j"));
  ASSERT_EQ(created.code, 201) << created.body.dump();
  EXPECT_FALSE(created.body.contains("status"));
  EXPECT_EQ(created.body["metadata"]["generation"], 1);
  EXPECT_EQ(created.body["kind"], "FineTuneJob");
}

TEST_F(StatusSubresourceTest, MainResourceIgnoresStatusAndBumpsGenerationOnSpecChange) {
  json current = client.post(kJobs, job("j")).body;
  // Labels only: a new resourceVersion but the same generation.
  current["metadata"]["labels"] = {{"team", "ml"}};
  Reply relabeled = client.put(kJobs + "/j", current);
  ASSERT_EQ(relabeled.code, 200);
  EXPECT_EQ(relabeled.body["metadata"]["generation"], 1);
  EXPECT_NE(relabeled.body["metadata"]["resourceVersion"], current["metadata"]["resourceVersion"]);
  // Spec and status changed: the spec change counts, the status change is dropped.
  json next = relabeled.body;
  next["spec"]["epochs"] = 3;
  next["status"] = {{"phase", "Failed"}};
  Reply updated = client.put(kJobs + "/j", next);
  ASSERT_EQ(updated.code, 200);
  EXPECT_EQ(updated.body["metadata"]["generation"], 2);
  EXPECT_EQ(updated.body["spec"]["epochs"], 3);
  EXPECT_FALSE(updated.body.contains("status"));
}

TEST_F(StatusSubresourceTest, CustomResourceUpdatesMustNameTheResourceVersion) {
  json current = client.post(kJobs, job("j")).body;
  current["metadata"].erase("resourceVersion");
  current["spec"]["epochs"] = 2;
  Reply refused = client.put(kJobs + "/j", current);
  EXPECT_EQ(refused.code, 422);
  EXPECT_EQ(refused.body["reason"], "Invalid");
  EXPECT_EQ(client.put(kJobs + "/j/status", current).code, 422);
}

TEST_F(StatusSubresourceTest, StatusWritesChangeOnlyStatus) {
  json current = client.post(kJobs, job("j")).body;
  json body = current;
  body["status"] = {{"phase", "Running"}, {"observedGeneration", 1}};
  body["spec"]["epochs"] = 99;                // ignored on /status
  body["metadata"]["labels"] = {{"x", "y"}};  // ignored on /status
  Reply updated = client.put(kJobs + "/j/status", body);
  ASSERT_EQ(updated.code, 200) << updated.body.dump();
  EXPECT_EQ(updated.body["status"]["phase"], "Running");
  EXPECT_EQ(updated.body["spec"]["epochs"], 1);
  EXPECT_FALSE(updated.body["metadata"].contains("labels"));
  EXPECT_EQ(updated.body["metadata"]["generation"], 1);
  EXPECT_EQ(client.get(kJobs + "/j").body["status"]["phase"], "Running");
  EXPECT_EQ(client.get(kJobs + "/j/status").body["status"]["phase"], "Running");
  // The status write is optimistic-concurrency checked too.
  Reply stale = client.put(kJobs + "/j/status", body);  // still the create's resourceVersion
  EXPECT_EQ(stale.code, 409);
  EXPECT_EQ(stale.body["reason"], "Conflict");
  // A merge patch of /status works the same way.
  Reply patched = client.send("PATCH", kJobs + "/j/status", {{"status", {{"phase", "Succeeded"}}}},
                              "application/merge-patch+json");
  ASSERT_EQ(patched.code, 200);
  EXPECT_EQ(patched.body["status"]["phase"], "Succeeded");
  EXPECT_EQ(patched.body["status"]["observedGeneration"], 1);
}

TEST_F(StatusSubresourceTest, StatusOnlyExistsWhereDeclared) {
  client.post("/api/v1/namespaces/ns/configmaps", {{"metadata", {{"name", "cm"}}}});
  EXPECT_EQ(client.get("/api/v1/namespaces/ns/configmaps/cm/status").code, 404);
  EXPECT_EQ(client.get(kJobs + "/j/scale").code, 404);
}

TEST_F(StatusSubresourceTest, PodsStartPendingLikeOnARealCluster) {
  Reply created = client.post("/api/v1/namespaces/ns/pods",
                              {{"metadata", {{"name", "p"}}}, {"status", {{"phase", "Running"}}}});
  ASSERT_EQ(created.code, 201);
  EXPECT_EQ(created.body["status"]["phase"], "Pending");
  FakeResponse kubelet =
      server.call("PATCH", "/api/v1/namespaces/ns/pods/p/status",
                  {{"status", {{"phase", "Succeeded"}}}}, "application/merge-patch+json");
  EXPECT_EQ(kubelet.code, 200);
  EXPECT_EQ(client.get("/api/v1/namespaces/ns/pods/p").body["status"]["phase"], "Succeeded");
}

TEST_F(StatusSubresourceTest, CreatingACrdServesItsResource) {
  json crd = {
      {"apiVersion", "apiextensions.k8s.io/v1"},
      {"kind", "CustomResourceDefinition"},
      {"metadata", {{"name", "widgets.example.com"}}},
      {"spec",
       {{"group", "example.com"},
        {"scope", "Namespaced"},
        {"names", {{"plural", "widgets"}, {"kind", "Widget"}}},
        {"versions",
         {{{"name", "v1"}, {"served", true}, {"subresources", {{"status", json::object()}}}}}}}}};
  const std::string widgets = "/apis/example.com/v1/namespaces/ns/widgets";
  EXPECT_EQ(client.get(widgets).code, 404);
  ASSERT_EQ(client.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd).code, 201);
  Reply created = client.post(widgets, {{"metadata", {{"name", "w"}}}, {"status", {{"a", 1}}}});
  ASSERT_EQ(created.code, 201);
  EXPECT_FALSE(created.body.contains("status"));
  EXPECT_EQ(created.body["apiVersion"], "example.com/v1");
}

}  // namespace
}  // namespace kubetune::kubefake
