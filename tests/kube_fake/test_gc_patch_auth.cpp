// Garbage collection over ownerReferences, PATCH flavours, authentication and injected failures.
#include <gtest/gtest.h>

#include "kubetune/kubefake/fake_api_server.h"
#include "test_client.h"

namespace kubetune::kubefake {
namespace {

using nlohmann::json;
using testing::Reply;
using testing::TestClient;

const std::string kJobs = "/apis/kubetune.io/v1alpha1/namespaces/ns/finetunejobs";
const std::string kPods = "/api/v1/namespaces/ns/pods";
const std::string kCms = "/api/v1/namespaces/ns/configmaps";

json owned(const std::string& name, const json& owner) {
  json ref = {{"apiVersion", owner["apiVersion"]},
              {"kind", owner["kind"]},
              {"name", owner["metadata"]["name"]},
              {"uid", owner["metadata"]["uid"]},
              {"controller", true},
              {"blockOwnerDeletion", true}};
  return {{"metadata", {{"name", name}, {"ownerReferences", {ref}}}}};
}

class GcPatchAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server.register_resource(
        {"kubetune.io", "v1alpha1", "finetunejobs", "FineTuneJob", true, true});
  }
  FakeApiServer server;
  TestClient client{server.url()};
};

TEST_F(GcPatchAuthTest, DeletingAnOwnerDeletesDependentsRecursively) {
  json job = client.post(kJobs, {{"metadata", {{"name", "j"}}}, {"spec", json::object()}}).body;
  json pod = client.post(kPods, owned("j-worker-0", job)).body;
  client.post(kCms, owned("j-config", job));
  client.post(kCms, owned("worker-scratch", pod));  // owned by the pod: second level
  client.post(kCms, {{"metadata", {{"name", "unrelated"}}}});
  ASSERT_EQ(client.del(kJobs + "/j").code, 200);
  EXPECT_EQ(client.get(kPods + "/j-worker-0").code, 404);
  EXPECT_EQ(client.get(kCms + "/j-config").code, 404);
  EXPECT_EQ(client.get(kCms + "/worker-scratch").code, 404);
  EXPECT_EQ(client.get(kCms + "/unrelated").code, 200);
}

TEST_F(GcPatchAuthTest, OrphanPolicyKeepsDependentsAndDropsTheReference) {
  json job = client.post(kJobs, {{"metadata", {{"name", "j"}}}}).body;
  client.post(kCms, owned("j-config", job));
  ASSERT_EQ(client.del(kJobs + "/j?propagationPolicy=Orphan").code, 200);
  Reply kept = client.get(kCms + "/j-config");
  ASSERT_EQ(kept.code, 200);
  EXPECT_FALSE(kept.body["metadata"].contains("ownerReferences"));
}

TEST_F(GcPatchAuthTest, MergePatchFollowsRfc7386) {
  client.post(kCms, {{"metadata", {{"name", "cm"}, {"labels", {{"a", "1"}, {"b", "2"}}}}},
                     {"data", {{"k", "v"}}}});
  Reply patched =
      client.send("PATCH", kCms + "/cm", {{"metadata", {{"labels", {{"a", nullptr}, {"c", "3"}}}}}},
                  "application/merge-patch+json");
  ASSERT_EQ(patched.code, 200) << patched.body.dump();
  EXPECT_EQ(patched.body["metadata"]["labels"], (json{{"b", "2"}, {"c", "3"}}));
  EXPECT_EQ(patched.body["data"]["k"], "v");
  Reply strategic =
      client.send("PATCH", kCms + "/cm", {{"metadata", {{"annotations", {{"x", "y"}}}}}},
                  "application/strategic-merge-patch+json");
  EXPECT_EQ(strategic.body["metadata"]["annotations"]["x"], "y");
  EXPECT_EQ(strategic.body["metadata"]["labels"]["b"], "2");
}

TEST_F(GcPatchAuthTest, PatchErrors) {
  json cm = client.post(kCms, {{"metadata", {{"name", "cm"}}}, {"data", {{"k", "v"}}}}).body;
  ASSERT_EQ(
      client.send("PATCH", kCms + "/cm", {{"data", {{"k", "w"}}}}, "application/merge-patch+json")
          .code,
      200);  // cm's resourceVersion is now an old one
  Reply unsupported = client.send("PATCH", kCms + "/cm", json::object(), "text/plain");
  EXPECT_EQ(unsupported.code, 415);
  EXPECT_EQ(unsupported.body["kind"], "Status");
  // A patch that names an old resourceVersion is conditional, and fails.
  Reply stale = client.send("PATCH", kCms + "/cm",
                            {{"metadata", {{"resourceVersion", cm["metadata"]["resourceVersion"]}}},
                             {"data", {{"k", "x"}}}},
                            "application/merge-patch+json");
  EXPECT_EQ(stale.code, 409);
  EXPECT_EQ(stale.body["reason"], "Conflict");
  Reply missing =
      client.send("PATCH", kCms + "/nope", json::object(), "application/merge-patch+json");
  EXPECT_EQ(missing.code, 404);
}

TEST_F(GcPatchAuthTest, TokenIsRequiredOnceSet) {
  server.set_token("s3cret");
  Reply anonymous = client.get(kCms);
  EXPECT_EQ(anonymous.code, 401);
  EXPECT_EQ(anonymous.body["kind"], "Status");
  EXPECT_EQ(anonymous.body["reason"], "Unauthorized");
  EXPECT_EQ(TestClient(server.url(), "wrong").get(kCms).code, 401);
  EXPECT_EQ(TestClient(server.url(), "s3cret").get(kCms).code, 200);
}

TEST_F(GcPatchAuthTest, InjectedErrorsFailTheNextMatchingRequests) {
  server.inject_error("GET", kCms, 503, 2);
  EXPECT_EQ(client.get(kCms).code, 503);
  EXPECT_EQ(client.get(kPods).code, 200);  // other paths are not affected
  Reply second = client.get(kCms);
  EXPECT_EQ(second.code, 503);
  EXPECT_EQ(second.body["reason"], "ServiceUnavailable");
  EXPECT_EQ(client.get(kCms).code, 200);
  EXPECT_EQ(server.request_count("GET", kCms), 3u);
  EXPECT_EQ(server.request_count("GET", "/api/v1/"), 4u);
}

}  // namespace
}  // namespace kubetune::kubefake
