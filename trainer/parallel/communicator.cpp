#include "trainer/parallel/communicator.h"

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include "common/contracts.h"
#include "trainer/parallel/gradient_buckets.h"
#include "trainer/parallel/nccl_backend.h"
#include "trainer/parallel/peer_wait.h"

namespace kubetune::parallel {
namespace {

using Clock = std::chrono::steady_clock;

class SingleProcess : public Communicator {
 public:
  explicit SingleProcess(const DistEnv& env) : Communicator(env) {}
  std::string backend_name() const override { return "none"; }
  void all_reduce_sum(torch::Tensor&, const char*) override {}
  void broadcast(std::vector<torch::Tensor>&, int, const char*) override {}
  void wait_for_peers(const char*) override {}
  std::function<void()> start_all_gather_in_place(torch::Tensor&, const char*) override {
    return [] {};
  }
  void reduce_scatter_sum(const torch::Tensor& flat, torch::Tensor& out, const char*) override {
    out.copy_(flat);
  }
  void attach_gradient_sync(const std::vector<torch::Tensor>&, const std::vector<std::string>&,
                            const BucketPlan&, Reduction) override {}
  void begin_synced_micro_step() override {}
};

// DDP's buckets summed across ranks and nothing else. Without a hook the Reducer divides every
// gradient by the world size, one more pass over all of them (4.9 GB of fp32 for a 1B model);
// the loss is normalised by the global target count instead (see the training loop).
class SumGradients : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  using CppCommHookInterface::CppCommHookInterface;
  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    std::vector<at::Tensor> tensors{bucket.getBufferRef()};
    return state_->allreduce(tensors)->getFuture();
  }
};

// Reduce-scatter instead of all-reduce for an optimizer that updates only this rank's slice of
// each bucket (optimizer_sharding.h): half the traffic while backward runs. The other slices keep
// this rank's local gradients, which nobody reads. A bucket that does not split evenly is
// all-reduced.
class ReduceScatterGradients
    : public c10d::CppCommHookInterface<c10::intrusive_ptr<c10d::ProcessGroup>> {
 public:
  ReduceScatterGradients(c10::intrusive_ptr<c10d::ProcessGroup> group,
                         std::vector<torch::Tensor> params, BucketPlan plan)
      : CppCommHookInterface(std::move(group)),
        params_(std::move(params)),
        plan_(std::move(plan)),
        checked_(plan_.size(), false) {}

  c10::intrusive_ptr<c10::ivalue::Future> runHook(c10d::GradBucket& bucket) override {
    torch::Tensor buffer = bucket.getBufferRef();
    const int world = state_->getSize();
    if (!splits_evenly(buffer.numel(), world)) {
      std::vector<at::Tensor> tensors{buffer};
      return state_->allreduce(tensors)->getFuture();
    }
    check_layout(bucket);
    const Slice mine = shard_of(buffer.numel(), state_->getRank(), world);
    torch::Tensor shard = buffer.narrow(0, mine.begin, mine.size);
    if (buffer.is_cuda()) {  // NCCL reduces in place when the output is the input's own slice
      auto work = state_->_reduce_scatter_base(shard, buffer);
      return work->getFuture()->then([buffer](c10::ivalue::Future&) { return c10::IValue(buffer); },
                                     c10::TensorType::get());
    }
    // Gloo's reduce-scatter has no future: on CPUs it is waited for here.
    torch::Tensor output = torch::empty_like(shard);
    state_->_reduce_scatter_base(output, buffer)->wait();
    shard.copy_(output);
    auto done = c10::make_intrusive<c10::ivalue::Future>(c10::TensorType::get());
    done->markCompleted(c10::IValue(buffer));
    return done;
  }

 private:
  // The sharded optimizer slices its flat weights as the plan says the buffer is laid out; a
  // different layout (a future c10d) would update the wrong elements, so it is checked once.
  void check_layout(c10d::GradBucket& bucket) {
    const size_t index = bucket.getIndex();
    if (checked_.at(index)) return;
    const auto& members = plan_.at(index);
    const auto gradients = bucket.getGradients();
    const auto parameters = bucket.getParameters();
    const torch::Tensor& buffer = bucket.getBufferRef();
    const auto* base = static_cast<const char*>(buffer.data_ptr());
    int64_t offset = 0;
    TORCH_CHECK(gradients.size() == members.size(), "gradient bucket ", index, " has ",
                gradients.size(), " tensors, the plan ", members.size());
    for (size_t j = 0; j < members.size(); ++j) {
      TORCH_CHECK(parameters[j].is_same(params_[members[j]]) &&
                      static_cast<const char*>(gradients[j].data_ptr()) ==
                          base + offset * buffer.element_size(),
                  "gradient bucket ", index, " is not laid out as planned (tensor ", j, ")");
      offset += params_[members[j]].numel();
    }
    checked_[index] = true;
  }

  std::vector<torch::Tensor> params_;
  BucketPlan plan_;
  std::vector<bool> checked_;
};

// Ends the process when a blocking collective outlives the timeout. c10d's own timeouts usually
// fire first; this is the backstop for anything that blocks without one.
class Watchdog {
 public:
  Watchdog(int rank, double timeout_seconds) : rank_(rank), timeout_(timeout_seconds) {
    thread_ = std::thread([this] { run(); });
  }
  ~Watchdog() {
    stop_ = true;
    thread_.join();
  }
  // Watches nest: a collective that autograd's thread runs inside a watched backward (fully
  // sharded weights) must not end the backward's watch. The outermost names the wait.
  void begin(const char* what) {
    if (depth_++ > 0) return;
    what_ = what;
    since_ns_ = Clock::now().time_since_epoch().count();
  }
  void end() {
    if (--depth_ == 0) since_ns_ = 0;
  }

 private:
  void run() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const long long since = since_ns_;
      if (since == 0) continue;
      double waited =
          std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(since))
              .count();
      if (waited > timeout_ + 5.0) {
        std::fprintf(stderr,
                     "rank %d: collective '%s' did not complete within %.0f s (distributed."
                     "timeoutSeconds); a peer probably died or stopped participating. Aborting.\n",
                     rank_, what_.load(), timeout_);
        std::fflush(stderr);
        std::_Exit(kExitRetryable);
      }
    }
  }
  int rank_;
  double timeout_;
  std::atomic<bool> stop_{false};
  std::atomic<int> depth_{0};
  std::atomic<long long> since_ns_{0};
  std::atomic<const char*> what_{""};
  std::thread thread_;
};

class C10dCommunicator : public Communicator {
 public:
  C10dCommunicator(const DistEnv& env, const std::string& backend, double timeout_seconds)
      : Communicator(env), watchdog_(env.rank, timeout_seconds) {
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = static_cast<size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    watchdog_.begin("rendezvous (TCPStore at MASTER_ADDR:MASTER_PORT)");
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    watchdog_.end();
    peer_wait_ = std::make_unique<PeerWait>(store, env.rank, env.world_size, timeout);

    group_ = c10::make_intrusive<c10d::ProcessGroup>(store, env.rank, env.world_size);
    if (backend == "nccl") {
      auto nccl = make_nccl_backend(c10::make_intrusive<c10d::PrefixStore>("nccl", store), env.rank,
                                    env.world_size, timeout);
      group_->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, nccl);
      group_->setDefaultBackend(c10d::ProcessGroup::BackendType::NCCL);
      name_ = "nccl";
    } else {
      auto options = c10d::ProcessGroupGloo::Options::create(timeout);
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
          c10::make_intrusive<c10d::PrefixStore>("gloo", store), env.rank, env.world_size, options);
      group_->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
      group_->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
      name_ = "gloo";
    }
  }

  std::string backend_name() const override { return name_; }

  void all_reduce_sum(torch::Tensor& tensor, const char* what) override {
    std::vector<torch::Tensor> tensors{tensor};
    run(what, [&] { return group_->allreduce(tensors); });
  }

  void broadcast(std::vector<torch::Tensor>& tensors, int root, const char* what) override {
    torch::NoGradGuard no_grad;  // overwriting parameters in place is not part of any graph
    c10d::BroadcastOptions options;
    options.rootRank = root;
    for (auto& t : tensors) {
      std::vector<torch::Tensor> one{t};
      run(what, [&] { return group_->broadcast(one, options); });
    }
  }

  void wait_for_peers(const char* what) override { peer_wait_->wait(what); }

  std::function<void()> start_all_gather_in_place(torch::Tensor& flat, const char* what) override {
    torch::NoGradGuard no_grad;
    const Slice mine = shard_of(flat.numel(), env_.rank, env_.world_size);
    torch::Tensor shard = flat.narrow(0, mine.begin, mine.size);
    // NCCL gathers in place when the input is the output's own slice; Gloo gets its own input.
    torch::Tensor input = flat.is_cuda() ? shard : shard.clone();
    c10::intrusive_ptr<c10d::Work> work;
    run_start(what, [&] { work = group_->_allgather_base(flat, input); });
    return [this, work, input, what] { run_start(what, [&] { work->wait(); }); };
  }

  void reduce_scatter_sum(const torch::Tensor& flat, torch::Tensor& out,
                          const char* what) override {
    torch::NoGradGuard no_grad;
    torch::Tensor input = flat;  // c10d takes it by reference
    run(what, [&] { return group_->_reduce_scatter_base(out, input); });
  }
  void attach_gradient_sync(const std::vector<torch::Tensor>& params,
                            const std::vector<std::string>& names, const BucketPlan& plan,
                            Reduction reduction) override {
    std::unordered_map<size_t, std::string> param_names;
    for (size_t i = 0; i < names.size(); ++i) param_names[i] = names[i];
    int64_t largest = 0;
    for (const auto& bucket : plan) {
      int64_t bytes = 0;
      for (size_t i : bucket) bytes += params[i].numel() * params[i].element_size();
      largest = std::max(largest, bytes);
    }
    // The buckets are planned for the order gradients arrive in (plan_gradient_buckets) and never
    // rebuilt: the sharded optimizer's weights are laid out like them.
    reducer_ = std::make_unique<c10d::Reducer>(
        params, plan, group_, std::vector<bool>(params.size(), false), largest,
        /*find_unused_parameters=*/false,
        // Gradients become views into the all-reduce buckets: no copy back after the all-reduce
        // (it would sit at the end of backward) and no second copy of the gradients in memory.
        /*gradient_as_bucket_view=*/true, param_names, largest,
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false,
        std::vector<int64_t>(plan.size(), largest));
    if (reduction == Reduction::kReduceScatter)
      reducer_->register_comm_hook(std::make_unique<ReduceScatterGradients>(group_, params, plan));
    else
      reducer_->register_comm_hook(std::make_unique<SumGradients>(group_));
  }

  void begin_synced_micro_step() override {
    if (!reducer_) return;
    reducer_->prepare_for_forward();
    reducer_->prepare_for_backward({});
  }

 protected:
  void watch_begin(const char* what) override { watchdog_.begin(what); }
  void watch_end() override { watchdog_.end(); }

 private:
  // A collective's start or wait (`f`), watched, with failures named.
  template <class F>
  void run_start(const char* what, F&& f) {
    Watch watch(*this, what);
    try {
      f();
    } catch (const std::exception& e) {
      throw collective_failure(env_.rank, what, e);
    }
  }

  // A collective started by `start` and waited for.
  template <class F>
  void run(const char* what, F&& start) {
    run_start(what, [&] { start()->wait(); });
  }

  Watchdog watchdog_;
  std::unique_ptr<PeerWait> peer_wait_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  std::unique_ptr<c10d::Reducer> reducer_;
  std::string name_;
};

}  // namespace

bool is_collective_failure(const std::exception& e) {
  if (dynamic_cast<const CollectiveError*>(&e) || dynamic_cast<const c10::DistError*>(&e))
    return true;
  const std::string message = e.what();
  for (const char* sign :
       {"Timed out", "timed out", "Connection closed", "Connection reset", "gloo", "NCCL"})
    if (message.find(sign) != std::string::npos) return true;
  return false;
}

CollectiveError collective_failure(int rank, const std::string& what, const std::exception& cause) {
  const std::string message = cause.what();
  return CollectiveError(
      "rank " + std::to_string(rank) + ": collective '" + what +
      "' failed (a peer died, hung or timed out): " + message.substr(0, message.find('\n')));
}

Communicator::Watch::Watch(Communicator& c, const char* what) : c_(c) { c_.watch_begin(what); }
Communicator::Watch::~Watch() { c_.watch_end(); }

std::unique_ptr<Communicator> Communicator::create(const DistEnv& env, const std::string& backend,
                                                   torch::Device device, double timeout_seconds) {
  if (!env.distributed()) return std::make_unique<SingleProcess>(env);
  std::string chosen = backend;
  if (chosen == "auto") chosen = device.is_cuda() && nccl_available() ? "nccl" : "gloo";
  if (chosen == "nccl" && !device.is_cuda())
    throw std::runtime_error("distributed.backend=nccl needs GPUs; this process runs on CPU");
  return std::make_unique<C10dCommunicator>(env, chosen, timeout_seconds);
}

}  // namespace kubetune::parallel
