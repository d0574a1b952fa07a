// Watch streams: ordering, incremental delivery, bookmarks, 410 from compacted history,
// dropped connections, timeouts, selector transitions and concurrent writers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kubetune/kubefake/fake_api_server.h"
#include "test_client.h"

namespace kubetune::kubefake {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using testing::Reply;
using testing::TestClient;
using testing::WatchReader;

const std::string kCms = "/api/v1/namespaces/ns/configmaps";

json config_map(const std::string& name, json labels = json::object()) {
  return {{"metadata", {{"name", name}, {"labels", labels}}}, {"data", {{"k", "v"}}}};
}

std::string rv_text(const json& object) { return object["metadata"]["resourceVersion"]; }
uint64_t rv_of(const json& object) { return std::stoull(rv_text(object)); }

class WatchTest : public ::testing::Test {
 protected:
  FakeApiServer server;
  TestClient client{server.url()};
};

TEST_F(WatchTest, StreamsAddedModifiedDeletedInOrderAsTheyHappen) {
  Reply list = client.get(kCms);
  WatchReader watch(server.url(), kCms + "?watch=1&timeoutSeconds=20&resourceVersion=" +
                                      list.body["metadata"]["resourceVersion"].get<std::string>());
  ASSERT_EQ(watch.status_code(), 200);
  EXPECT_FALSE(watch.next(milliseconds(200)));  // nothing happened yet

  auto started = std::chrono::steady_clock::now();
  json created = client.post(kCms, config_map("a")).body;
  std::optional<json> added = watch.next();
  // Delivered while the stream is open (20 s timeout), not when it ends.
  ASSERT_TRUE(added);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
  EXPECT_EQ((*added)["type"], "ADDED");
  EXPECT_EQ((*added)["object"], created);
  EXPECT_EQ((*added)["object"]["kind"], "ConfigMap");

  created["data"]["k"] = "w";
  json modified = client.put(kCms + "/a", created).body;
  json deleted = client.del(kCms + "/a").body;
  std::optional<json> second = watch.next();
  std::optional<json> third = watch.next();
  ASSERT_TRUE(second && third);
  EXPECT_EQ((*second)["type"], "MODIFIED");
  EXPECT_EQ((*second)["object"]["data"]["k"], "w");
  EXPECT_EQ(rv_of((*second)["object"]), rv_of(modified));
  EXPECT_EQ((*third)["type"], "DELETED");
  EXPECT_EQ(rv_of((*third)["object"]), rv_of(deleted));
}

TEST_F(WatchTest, BookmarksCarryOnlyTheResourceVersionWhenRequested) {
  server.set_bookmark_interval(milliseconds(200));
  json created = client.post(kCms, config_map("a")).body;
  WatchReader with(server.url(), kCms +
                                     "?watch=true&allowWatchBookmarks=true&timeoutSeconds=10"
                                     "&resourceVersion=" +
                                     rv_text(created));
  WatchReader without(server.url(),
                      kCms + "?watch=true&timeoutSeconds=10&resourceVersion=" + rv_text(created));
  json other = client.post("/api/v1/namespaces/elsewhere/configmaps", config_map("b")).body;
  // Bookmarks keep coming; the ones after the write above carry its resourceVersion: "you have
  // seen everything up to here", including writes this watch does not select.
  std::optional<json> bookmark;
  for (int i = 0; i < 10; ++i) {
    bookmark = with.next(milliseconds(2000));
    ASSERT_TRUE(bookmark);
    ASSERT_EQ((*bookmark)["type"], "BOOKMARK");
    if (rv_of((*bookmark)["object"]) == rv_of(other)) break;
    EXPECT_LT(rv_of((*bookmark)["object"]), rv_of(other));
  }
  const json& object = (*bookmark)["object"];
  EXPECT_EQ(rv_of(object), rv_of(other));
  EXPECT_EQ(object["kind"], "ConfigMap");
  EXPECT_EQ(object["apiVersion"], "v1");
  EXPECT_EQ(object["metadata"].size(), 1u);
  EXPECT_FALSE(without.next(milliseconds(600)));
}

TEST_F(WatchTest, WatchFromAResourceVersionReplaysLaterHistory) {
  json created = client.post(kCms, config_map("a")).body;
  json changed = created;
  changed["data"]["k"] = "2";
  client.put(kCms + "/a", changed);
  client.post(kCms, config_map("b"));
  WatchReader watch(server.url(),
                    kCms + "?watch=1&timeoutSeconds=10&resourceVersion=" + rv_text(created));
  std::optional<json> first = watch.next(), second = watch.next();
  ASSERT_TRUE(first && second);
  EXPECT_EQ((*first)["type"], "MODIFIED");
  EXPECT_EQ((*second)["type"], "ADDED");
  EXPECT_EQ((*second)["object"]["metadata"]["name"], "b");
  EXPECT_FALSE(watch.next(milliseconds(200)));
}

TEST_F(WatchTest, WatchWithoutResourceVersionStartsWithSyntheticAdded) {
  client.post(kCms, config_map("a"));
  client.post(kCms, config_map("b"));
  for (const std::string& rv : {std::string(""), std::string("&resourceVersion=0")}) {
    WatchReader watch(server.url(), kCms + "?watch=1&timeoutSeconds=10" + rv);
    std::optional<json> a = watch.next(), b = watch.next();
    ASSERT_TRUE(a && b);
    EXPECT_EQ((*a)["type"], "ADDED");
    EXPECT_EQ((*a)["object"]["metadata"]["name"], "a");
    EXPECT_EQ((*b)["object"]["metadata"]["name"], "b");
    client.post(kCms, config_map("c" + std::to_string(rv.size())));
    std::optional<json> live = watch.next();
    ASSERT_TRUE(live);
    EXPECT_EQ((*live)["type"], "ADDED");
  }
}

TEST_F(WatchTest, CompactedResourceVersionGivesExpiredErrorEvent) {
  json created = client.post(kCms, config_map("a")).body;
  client.post(kCms, config_map("b"));
  server.compact_now();
  WatchReader watch(server.url(),
                    kCms + "?watch=1&timeoutSeconds=10&resourceVersion=" + rv_text(created));
  EXPECT_EQ(watch.status_code(), 200);
  std::optional<json> error = watch.next();
  ASSERT_TRUE(error);
  EXPECT_EQ((*error)["type"], "ERROR");
  EXPECT_EQ((*error)["object"]["kind"], "Status");
  EXPECT_EQ((*error)["object"]["code"], 410);
  EXPECT_EQ((*error)["object"]["reason"], "Expired");
  EXPECT_TRUE(watch.wait_ended(milliseconds(2000)));
}

TEST_F(WatchTest, HistoryLimitKeepsOnlyTheLastEvents) {
  server.set_watch_history_limit(2);
  std::vector<json> objects;
  for (int i = 0; i < 5; ++i)
    objects.push_back(client.post(kCms, config_map("m" + std::to_string(i))).body);
  WatchReader too_old(server.url(),
                      kCms + "?watch=1&timeoutSeconds=5&resourceVersion=" + rv_text(objects[1]));
  std::optional<json> error = too_old.next();
  ASSERT_TRUE(error);
  EXPECT_EQ((*error)["object"]["code"], 410);
  WatchReader recent(server.url(),
                     kCms + "?watch=1&timeoutSeconds=5&resourceVersion=" + rv_text(objects[2]));
  std::optional<json> a = recent.next(), b = recent.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)["object"]["metadata"]["name"], "m3");
  EXPECT_EQ((*b)["object"]["metadata"]["name"], "m4");
}

TEST_F(WatchTest, DropWatchesEndsEveryStream) {
  WatchReader a(server.url(), kCms + "?watch=1&timeoutSeconds=30");
  WatchReader b(server.url(), "/api/v1/pods?watch=1&timeoutSeconds=30");
  EXPECT_EQ(server.open_watch_count(), 2u);
  server.drop_watches();
  EXPECT_TRUE(a.wait_ended(milliseconds(3000)));
  EXPECT_TRUE(b.wait_ended(milliseconds(3000)));
  // The server counts a stream closed once its handler returns, just after the client saw the end.
  const auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
  while (server.open_watch_count() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(server.open_watch_count(), 0u);
}

TEST_F(WatchTest, ClientHangingUpEndsTheServerSideStream) {
  {
    WatchReader watch(server.url(), kCms + "?watch=1&timeoutSeconds=30");
    client.post(kCms, config_map("a"));
    ASSERT_TRUE(watch.next());
    EXPECT_EQ(server.open_watch_count(), 1u);
  }  // cancels the request and closes the connection
  // The server notices the hang-up when it next writes to the connection: poke it with events.
  for (int i = 0; i < 50 && server.open_watch_count() > 0; ++i) {
    client.post(kCms, config_map("poke-" + std::to_string(i)));
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_EQ(server.open_watch_count(), 0u);
}

TEST_F(WatchTest, StreamEndsAtTimeoutSeconds) {
  auto started = std::chrono::steady_clock::now();
  WatchReader watch(server.url(), kCms + "?watch=1&timeoutSeconds=1");
  EXPECT_FALSE(watch.wait_ended(milliseconds(500)));
  EXPECT_TRUE(watch.wait_ended(milliseconds(3000)));
  EXPECT_GE(std::chrono::steady_clock::now() - started, milliseconds(900));
}

TEST_F(WatchTest, SelectorWatchSeesObjectsEnterAndLeave) {
  WatchReader watch(server.url(), kCms + "?watch=1&timeoutSeconds=10&labelSelector=app%3Dx");
  json cm = client.post(kCms, config_map("a", {{"app", "y"}})).body;  // not visible
  cm["metadata"]["labels"]["app"] = "x";
  cm = client.put(kCms + "/a", cm).body;  // enters the selection
  cm["metadata"]["labels"]["app"] = "z";
  client.put(kCms + "/a", cm);  // leaves it
  std::optional<json> enter = watch.next(), leave = watch.next();
  ASSERT_TRUE(enter && leave);
  EXPECT_EQ((*enter)["type"], "ADDED");
  EXPECT_EQ((*leave)["type"], "DELETED");
  EXPECT_FALSE(watch.next(milliseconds(200)));
}

TEST_F(WatchTest, ConcurrentWritersAndWatchersSeeEveryEventInOrder) {
  const int kWriters = 6, kPerWriter = 15;
  std::vector<std::unique_ptr<WatchReader>> watches;
  for (int i = 0; i < 3; ++i) {
    watches.push_back(
        std::make_unique<WatchReader>(server.url(), kCms + "?watch=1&timeoutSeconds=20"));
  }
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      TestClient own(server.url());
      for (int i = 0; i < kPerWriter; ++i) {
        if (own.post(kCms, config_map("w" + std::to_string(w) + "-" + std::to_string(i))).code !=
            201) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(failures, 0);
  for (auto& watch : watches) {
    uint64_t last = 0;
    for (int i = 0; i < kWriters * kPerWriter; ++i) {
      std::optional<json> event = watch->next();
      ASSERT_TRUE(event) << "event " << i;
      uint64_t rv = rv_of((*event)["object"]);
      EXPECT_GT(rv, last);
      last = rv;
    }
  }
}

TEST_F(WatchTest, ClusterWideWatchOfACustomResource) {
  server.register_resource({"kubetune.io", "v1alpha1", "finetunejobs", "FineTuneJob", true, true});
  WatchReader watch(server.url(),
                    "/apis/kubetune.io/v1alpha1/finetunejobs?watch=1&timeoutSeconds=10");
  client.post("/apis/kubetune.io/v1alpha1/namespaces/a/finetunejobs",
              {{"metadata", {{"name", "j"}}}});
  client.post("/apis/kubetune.io/v1alpha1/namespaces/b/finetunejobs",
              {{"metadata", {{"name", "j"}}}});
  std::optional<json> a = watch.next(), b = watch.next();
  ASSERT_TRUE(a && b);
  EXPECT_EQ((*a)["object"]["metadata"]["namespace"], "a");
  EXPECT_EQ((*b)["object"]["metadata"]["namespace"], "b");
  EXPECT_EQ((*b)["object"]["kind"], "FineTuneJob");
}

}  // namespace
}  // namespace kubetune::kubefake
