// The informer's list + watch against the fake API server: dropped streams, 410 Gone, errors.
#include <gtest/gtest.h>

#include <algorithm>

#include "kubetune/kubefake/fake_api_server.h"
#include "operator/kube/informer.h"
#include "test_support.h"

namespace kubetune::op::kube {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::eventually;

const char* kCollection = "/api/v1/namespaces/default/configmaps";

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server.set_bookmark_interval(milliseconds(100));
    config.server = server.url();
    client = std::make_unique<KubeClient>(config);
  }
  void create(const std::string& name, const json& labels = json::object()) {
    ASSERT_EQ(
        server
            .call("POST", kCollection,
                  {{"metadata", {{"name", name}, {"labels", labels}}}, {"data", json::object()}})
            .code,
        201);
  }
  std::vector<std::string> names(const std::vector<json>& objects) {
    std::vector<std::string> out;
    for (const auto& o : objects) out.push_back(o["metadata"]["name"]);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::unique_ptr<Informer> start(InformerOptions o = {}) {
    o.ns = "default";
    o.min_backoff = milliseconds(300);
    auto inf = std::make_unique<Informer>(*client, resources::kConfigMaps, o);
    inf->add_handler([this](const std::string& type, const json& obj) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.push_back(type + " " + obj["metadata"]["name"].get<std::string>());
    });
    inf->start();
    EXPECT_TRUE(inf->wait_for_sync(milliseconds(5000)));
    return inf;
  }
  bool saw(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    return std::find(seen.begin(), seen.end(), what) != seen.end();
  }

  kubefake::FakeApiServer server;
  ClientConfig config;
  std::unique_ptr<KubeClient> client;
  std::mutex mutex;
  std::vector<std::string> seen;
};

TEST_F(InformerTest, ListsThenWatches) {
  create("a");
  auto inf = start();
  EXPECT_TRUE(inf->get("default", "a"));
  EXPECT_TRUE(saw("ADDED a"));
  create("b");
  ASSERT_TRUE(eventually([&] { return saw("ADDED b"); }));
  server.call("DELETE", std::string(kCollection) + "/a");
  ASSERT_TRUE(eventually([&] { return saw("DELETED a"); }));
  EXPECT_FALSE(inf->get("default", "a"));
  EXPECT_EQ(inf->list_count(), 1);
}

TEST_F(InformerTest, DroppedWatchResumesFromTheLastResourceVersion) {
  auto inf = start();
  server.drop_watches();
  create("after-drop");
  ASSERT_TRUE(eventually([&] { return saw("ADDED after-drop"); }));
  EXPECT_GE(inf->watch_count(), 2);
  EXPECT_EQ(inf->list_count(), 1);  // no re-list needed
}

TEST_F(InformerTest, GoneMeansListAgainAndReportTheDifferences) {
  create("stays");
  create("goes");
  auto inf = start();
  // The re-watch fails once (the informer backs off 300 ms); meanwhile objects change and the
  // history is compacted, so the re-watch from the old resourceVersion gets 410 Gone.
  server.inject_error("GET", kCollection, 500, 1);
  server.drop_watches();
  server.call("DELETE", std::string(kCollection) + "/goes");
  create("new");
  server.compact_now();
  ASSERT_TRUE(eventually([&] { return inf->list_count() >= 2; }));
  ASSERT_TRUE(eventually([&] { return saw("DELETED goes") && saw("ADDED new"); }));
  EXPECT_TRUE(inf->get("default", "stays"));
  EXPECT_FALSE(inf->get("default", "goes"));
  // And it keeps watching.
  create("later");
  ASSERT_TRUE(eventually([&] { return saw("ADDED later"); }));
}

// list() through the index answers as a scan would, through relabels, deletes and a relist.
TEST_F(InformerTest, IndexedListEqualsAScan) {
  create("a0", {{"job", "a"}});
  create("a1", {{"job", "a"}, {"role", "worker"}});
  create("b0", {{"job", "b"}});
  create("none");
  InformerOptions o;
  o.index_label = "job";
  auto inf = start(o);
  using V = std::vector<std::string>;
  EXPECT_EQ(names(inf->list("default", {{"job", "a"}})), (V{"a0", "a1"}));
  EXPECT_EQ(names(inf->list("default", {{"job", "a"}, {"role", "worker"}})), V{"a1"});
  EXPECT_EQ(names(inf->list("other", {{"job", "a"}})), V{});
  EXPECT_EQ(names(inf->list("default", {{"role", "worker"}})), V{"a1"});  // a scan
  EXPECT_EQ(names(inf->list("default")), (V{"a0", "a1", "b0", "none"}));

  // a0 moves from job a to job b; a1 goes; "none" joins a.
  server.call("PATCH", std::string(kCollection) + "/a0",
              {{"metadata", {{"labels", {{"job", "b"}}}}}}, "application/merge-patch+json");
  server.call("DELETE", std::string(kCollection) + "/a1");
  server.call("PATCH", std::string(kCollection) + "/none",
              {{"metadata", {{"labels", {{"job", "a"}}}}}}, "application/merge-patch+json");
  ASSERT_TRUE(eventually([&] { return names(inf->list("default", {{"job", "a"}})) == V{"none"}; }));
  EXPECT_EQ(names(inf->list("default", {{"job", "b"}})), (V{"a0", "b0"}));

  // A relist after 410 rebuilds the index from the fresh list (the re-watch fails once, as in
  // GoneMeansListAgainAndReportTheDifferences, so that the compaction comes first).
  server.inject_error("GET", kCollection, 500, 1);
  server.drop_watches();
  server.call("DELETE", std::string(kCollection) + "/b0");
  create("a2", {{"job", "a"}});
  server.compact_now();
  ASSERT_TRUE(eventually([&] { return inf->list_count() >= 2; }));
  ASSERT_TRUE(eventually([&] {
    return names(inf->list("default", {{"job", "a"}})) == V{"a2", "none"};
  }));
  EXPECT_EQ(names(inf->list("default", {{"job", "b"}})), V{"a0"});
}

TEST_F(InformerTest, ReconnectsWithBackOffWhileTheServerFails) {
  auto inf = start();
  server.inject_error("GET", kCollection, 503, 3);
  server.drop_watches();
  create("eventually");
  ASSERT_TRUE(eventually([&] { return saw("ADDED eventually"); }));
}

TEST_F(InformerTest, StopEndsAnOpenWatchPromptly) {
  auto inf = start();
  ASSERT_TRUE(eventually([&] { return server.open_watch_count() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  inf->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(3000));
}

TEST_F(InformerTest, BearerTokenIsSent) {
  server.set_token("t0k3n");
  config.token = "t0k3n";
  client = std::make_unique<KubeClient>(config);
  create("x");
  auto inf = start();
  EXPECT_TRUE(inf->get("default", "x"));
  ClientConfig no_token;
  no_token.server = server.url();
  KubeClient anonymous(no_token);
  try {
    anonymous.get(kCollection);
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), 401);
  }
}

}  // namespace
}  // namespace kubetune::op::kube
