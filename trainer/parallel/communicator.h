// Collectives between the training processes, on LibTorch's c10d: a TCPStore rendezvous at
// MASTER_ADDR:MASTER_PORT, ProcessGroupNCCL on GPUs and ProcessGroupGloo on CPUs, and c10d's own
// DDP Reducer for gradients (bucketed all-reduce that overlaps with the backward pass).
//
// Nothing here may hang: every collective has a timeout, and a watchdog thread ends the process
// with a message naming the collective if one outlives it (e.g. a peer died mid-step).
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/parallel/dist_env.h"

namespace kubetune::parallel {

// A collective that failed or timed out: a peer died, hung or lost its connection.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// True for the errors c10d/Gloo/NCCL raise when a peer is gone or a collective timed out.
bool is_collective_failure(const std::exception& e);

// The error to throw for such a failure: names the rank and the collective, keeps the cause's
// first line (c10d appends long backtraces).
CollectiveError collective_failure(int rank, const std::string& what, const std::exception& cause);

class Communicator {
 public:
  // backend: auto | nccl | gloo. A single process gets a communicator whose collectives are no-ops.
  static std::unique_ptr<Communicator> create(const DistEnv& env, const std::string& backend,
                                              torch::Device device, double timeout_seconds);
  virtual ~Communicator() = default;

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }
  virtual std::string backend_name() const = 0;

  virtual void all_reduce_sum(torch::Tensor& tensor, const char* what) = 0;
  virtual void broadcast(std::vector<torch::Tensor>& tensors, int root, const char* what) = 0;
  // A barrier after work whose length no timeout can bound: rank 0 writing a checkpoint or the
  // outputs, hashing the checkpoint it resumes from, every rank loading a model. It waits for as
  // long as the processes still on their way keep their heartbeat (a thread of each process
  // that ticks in the rendezvous store); a peer that died, or froze for
  // distributed.timeoutSeconds, ends it with a CollectiveError naming that rank. A collective's
  // barrier would instead time out on the others while rank 0 is still writing.
  virtual void wait_for_peers(const char* what) = 0;
  // `flat` is world_size equal slices, this rank's filled in; afterwards every slice is, in place.
  void all_gather_in_place(torch::Tensor& flat, const char* what) {
    start_all_gather_in_place(flat, what)();
  }
  // The same, started: the returned function waits for it (on GPUs only the current stream
  // waits, not the host). It must be called before `flat` is read.
  virtual std::function<void()> start_all_gather_in_place(torch::Tensor& flat,
                                                          const char* what) = 0;

  // `flat` is world_size equal slices; `out` (one slice's size) gets the sum over ranks of their
  // slice number rank(). For fully sharded weights (full_sharding.h).
  virtual void reduce_scatter_sum(const torch::Tensor& flat, torch::Tensor& out,
                                  const char* what) = 0;

  // Gradient synchronisation for `params` (all trainable, same order on every rank) in the
  // buckets of `plan` (gradient_buckets.h). Call begin_synced_micro_step() before the forward of
  // the micro-step whose backward should synchronise (the last of an accumulation); other
  // micro-steps accumulate locally. Gradients are summed over ranks (torch DDP averages): the
  // loss is already divided by the global target count.
  //   kAllReduce: every rank gets every bucket's sum.
  //   kReduceScatter: a bucket that splits evenly (splits_evenly) is reduce-scattered: only this
  //     rank's slice of it (shard_of) holds the sum, the rest keeps local values. Other buckets
  //     are all-reduced. For optimizers that update only their own slice (optimizer_sharding.h).
  enum class Reduction { kAllReduce, kReduceScatter };
  virtual void attach_gradient_sync(const std::vector<torch::Tensor>& params,
                                    const std::vector<std::string>& names,
                                    const std::vector<std::vector<size_t>>& plan,
                                    Reduction reduction) = 0;
  virtual void begin_synced_micro_step() = 0;

  // Marks a blocking region (e.g. a backward that ends in the gradient all-reduce) for the
  // watchdog.
  class Watch {
   public:
    Watch(Communicator& c, const char* what);
    ~Watch();

   private:
    Communicator& c_;
  };

 protected:
  explicit Communicator(const DistEnv& env) : env_(env) {}
  virtual void watch_begin(const char* /*what*/) {}
  virtual void watch_end() {}
  DistEnv env_;
};

}  // namespace kubetune::parallel
