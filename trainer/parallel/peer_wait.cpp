#include "trainer/parallel/peer_wait.h"

#include <algorithm>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "trainer/parallel/communicator.h"

namespace kubetune::parallel {
namespace {

using Clock = std::chrono::steady_clock;

std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }

// A tick at least four times per timeout, so one late tick is not taken for a stop; at most every
// 5 s, so a long timeout does not make the store idle for minutes.
std::chrono::milliseconds beat_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(5000));
}

}  // namespace

PeerWait::PeerWait(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
                   std::chrono::milliseconds timeout)
    : store_(store),
      heartbeat_store_(store->clone()),
      rank_(rank),
      world_(world_size),
      timeout_(timeout) {
  heartbeat_store_->add(heartbeat_key(rank_), 1);  // the key exists before anyone waits on it
  heartbeat_ = std::thread([this] { beat(); });
}

PeerWait::~PeerWait() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stop_requested_.notify_all();
  heartbeat_.join();
}

void PeerWait::beat() {
  std::unique_lock lock(mutex_);
  while (!stop_requested_.wait_for(lock, beat_interval(timeout_), [this] { return stop_; })) {
    try {
      heartbeat_store_->add(heartbeat_key(rank_), 1);
    } catch (const std::exception&) {
      return;  // the store is gone (rank 0 ended): a wait, if any, reports it
    }
  }
}

void PeerWait::wait(const char* what) {
  const std::string prefix = "peers/" + std::to_string(waits_++) + "/";
  auto arrived_key = [&](int rank) { return prefix + std::to_string(rank); };
  struct Peer {
    int rank;
    int64_t beats = -1;
    Clock::time_point changed = Clock::now();
  };
  std::vector<Peer> on_their_way;
  for (int r = 0; r < world_; ++r)
    if (r != rank_) on_their_way.push_back({r});
  const auto poll = std::min(beat_interval(timeout_), std::chrono::milliseconds(1000));
  auto pause = std::chrono::milliseconds(2);
  try {
    store_->set(arrived_key(rank_), "");
    while (!on_their_way.empty()) {
      on_their_way.erase(
          std::remove_if(on_their_way.begin(), on_their_way.end(),
                         [&](const Peer& p) { return store_->check({arrived_key(p.rank)}); }),
          on_their_way.end());
      for (Peer& p : on_their_way) {
        const int64_t beats = store_->add(heartbeat_key(p.rank), 0);  // reads the counter
        if (beats != p.beats) {
          p.beats = beats;
          p.changed = Clock::now();
        } else if (Clock::now() - p.changed > timeout_) {
          throw CollectiveError("rank " + std::to_string(rank_) + ": waiting for '" + what +
                                "', rank " + std::to_string(p.rank) +
                                " has shown no sign of life for " +
                                std::to_string(timeout_.count() / 1000) +
                                " s (distributed.timeoutSeconds): it died or froze");
        }
      }
      if (!on_their_way.empty()) std::this_thread::sleep_for(pause);
      pause = std::min(2 * pause, poll);  // quick when all arrive together, light when not
    }
    leave(prefix);
  } catch (const CollectiveError&) {
    throw;
  } catch (const std::exception& e) {
    throw collective_failure(rank_, what, e);
  }
}

// Rank 0 hosts the store: returning before every peer has seen the wait end (say, at the end of
// training, to exit) would cut off a peer still polling. Each peer says it left; rank 0 returns
// once all have, or after the timeout (a peer that died since is the next collective's to report).
void PeerWait::leave(const std::string& prefix) {
  const std::string key = prefix + "left";
  store_->add(key, 1);
  if (rank_ != 0) return;
  const auto deadline = Clock::now() + timeout_;
  while (store_->add(key, 0) < world_ && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the others are a step away
}

}  // namespace kubetune::parallel
