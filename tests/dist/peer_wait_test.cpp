// PeerWait (trainer/parallel/peer_wait.h) between two "processes" of one test, each a thread with
// its own connection to a real c10d TCPStore on 127.0.0.1: a slow peer is waited for however long
// it takes, a peer whose heartbeat stops ends the wait naming it.
#include "trainer/parallel/peer_wait.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "trainer/parallel/communicator.h"

namespace kubetune::parallel {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
constexpr milliseconds kTimeout{1000};

struct TwoRanks {
  c10::intrusive_ptr<c10d::TCPStore> host, client;
  TwoRanks() {
    c10d::TCPStoreOptions options;
    options.port = 0;  // any free port
    options.isServer = true;
    options.waitWorkers = false;
    options.timeout = kTimeout;
    host = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
    options.isServer = false;
    options.port = host->getPort();
    client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  }
};

TEST(PeerWait, WaitsForASlowPeerFarLongerThanTheTimeout) {
  TwoRanks stores;
  PeerWait rank0(stores.host, 0, 2, kTimeout);
  auto slow_rank1 = std::async(std::launch::async, [&] {
    PeerWait rank1(stores.client, 1, 2, kTimeout);
    std::this_thread::sleep_for(4 * kTimeout);  // writing to a slow volume; the heartbeat goes on
    rank1.wait("test");
    rank1.wait("test, again");
  });
  const auto start = Clock::now();
  rank0.wait("test");
  EXPECT_GE(Clock::now() - start, 3 * kTimeout);
  rank0.wait("test, again");  // the second wait is its own event, not satisfied by the first
  slow_rank1.get();
}

TEST(PeerWait, APeerWhoseHeartbeatStopsEndsTheWaitNamingIt) {
  TwoRanks stores;
  PeerWait rank0(stores.host, 0, 2, kTimeout);
  { PeerWait rank1(stores.client, 1, 2, kTimeout); }  // started its heartbeat, then froze
  const auto start = Clock::now();
  try {
    rank0.wait("the checkpoint");
    FAIL() << "the wait returned though rank 1 never came";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for 'the checkpoint', rank 1 has shown no sign"),
              std::string::npos)
        << e.what();
  }
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, kTimeout);
  EXPECT_LT(waited, 3 * kTimeout);
}

TEST(PeerWait, AStoreThatIsGoneIsACollectiveFailure) {
  auto stores = std::make_unique<TwoRanks>();
  auto rank1 = std::make_unique<PeerWait>(stores->client, 1, 2, kTimeout);
  stores->host.reset();  // rank 0, the store's host, ended
  EXPECT_THROW(rank1->wait("anything"), CollectiveError);
}

}  // namespace
}  // namespace kubetune::parallel
