#include <gtest/gtest.h>

#include <thread>

#include "operator/runtime/work_queue.h"

namespace kubetune::op {
namespace {

using std::chrono::milliseconds;

TEST(WorkQueue, DeduplicatesKeys) {
  WorkQueue q;
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.depth(), 2u);
  std::string k;
  ASSERT_TRUE(q.get(k));
  EXPECT_EQ(k, "a");
}

TEST(WorkQueue, KeyAddedWhileProcessingComesBackAfterDone) {
  WorkQueue q;
  q.add("a");
  std::string k;
  ASSERT_TRUE(q.get(k));
  q.add("a");  // not handed to a second worker while the first has it
  EXPECT_EQ(q.depth(), 0u);
  q.done("a");
  EXPECT_EQ(q.depth(), 1u);
}

TEST(WorkQueue, RateLimitedBackOffDoublesPerKeyAndForgetResets) {
  WorkQueue q(milliseconds(20), milliseconds(1000));
  std::string k;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    q.add_rate_limited("a");
    ASSERT_TRUE(q.get(k));
    q.done(k);
    const auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, milliseconds(20 << i)) << "failure " << i;
  }
  EXPECT_EQ(q.failures("a"), 3);
  EXPECT_EQ(q.failures("b"), 0);  // per key
  q.forget("a");
  EXPECT_EQ(q.failures("a"), 0);
}

TEST(WorkQueue, BackOffIsCapped) {
  WorkQueue q(milliseconds(10), milliseconds(40));
  std::string k;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    q.add_rate_limited("x");
    ASSERT_TRUE(q.get(k));
    q.done(k);
    // Uncapped, the sixth failure would wait 10 ms * 2^5 = 320 ms.
    if (i == 5) {
      EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(200));
    }
  }
}

TEST(WorkQueue, AddAfterKeepsTheEarliestTime) {
  WorkQueue q;
  q.add_after("a", std::chrono::seconds(30));
  q.add_after("a", milliseconds(10));
  std::string k;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(q.get(k));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(WorkQueue, ShutdownWakesWorkers) {
  WorkQueue q;
  std::thread t([&] {
    std::string k;
    EXPECT_FALSE(q.get(k));
  });
  std::this_thread::sleep_for(milliseconds(20));
  q.shutdown();
  t.join();
}

}  // namespace
}  // namespace kubetune::op
