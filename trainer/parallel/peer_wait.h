// Waiting for peers without a deadline, but not for dead ones (Communicator::wait_for_peers).
//
// Every process ticks a counter of its own in the rendezvous store (TCPStore) from a thread, a
// heartbeat that goes on while its main thread reads or writes files for as long as that takes.
// A wait marks this process as arrived and polls until every peer has too; a peer still on its way
// whose heartbeat has not moved for `timeout` has died or frozen, and ends the wait. If rank 0 (the
// store's host) freezes, the store calls themselves time out.
#pragma once

#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace c10d {
class Store;
}

namespace kubetune::parallel {

class PeerWait {
 public:
  // `store`: the rendezvous store; the heartbeat ticks on a connection of its own.
  PeerWait(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
           std::chrono::milliseconds timeout);
  ~PeerWait();
  PeerWait(const PeerWait&) = delete;
  PeerWait& operator=(const PeerWait&) = delete;

  // Returns when every process has called wait() as often as this one; throws CollectiveError
  // naming the peer that stopped (or the store's failure).
  void wait(const char* what);

 private:
  void beat();
  void leave(const std::string& prefix);

  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Store> heartbeat_store_;
  int rank_, world_;
  std::chrono::milliseconds timeout_;
  int64_t waits_ = 0;  // every process waits in the same order: the n-th wait is one event
  std::mutex mutex_;
  std::condition_variable stop_requested_;
  bool stop_ = false;
  std::thread heartbeat_;
};

}  // namespace kubetune::parallel
