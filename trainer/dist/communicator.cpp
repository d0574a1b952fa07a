#include "trainer/dist/communicator.h"

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

#include "trainer/dist/nccl_backend.h"

namespace kubetune::dist {
namespace {

using Clock = std::chrono::steady_clock;

class SingleProcess : public Communicator {
 public:
  explicit SingleProcess(const DistEnv& env) : Communicator(env) {}
  std::string backend_name() const override { return "none"; }
  void all_reduce_sum(torch::Tensor&, const char*) override {}
  void broadcast(std::vector<torch::Tensor>&, int, const char*) override {}
  void barrier(const char*) override {}
  void attach_gradient_sync(const std::vector<torch::Tensor>&, const std::vector<std::string>&,
                            double) override {}
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
  void begin(const char* what) {
    what_ = what;
    since_ns_ = Clock::now().time_since_epoch().count();
  }
  void end() { since_ns_ = 0; }

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
        std::_Exit(kExitCollectiveFailure);
      }
    }
  }
  int rank_;
  double timeout_;
  std::atomic<bool> stop_{false};
  std::atomic<long long> since_ns_{0};
  std::atomic<const char*> what_{""};
  std::thread thread_;
};

class C10dCommunicator : public Communicator {
 public:
  C10dCommunicator(const DistEnv& env, const std::string& backend, torch::Device device,
                   double timeout_seconds)
      : Communicator(env), device_(device), watchdog_(env.rank, timeout_seconds) {
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

  void barrier(const char* what) override {
    // A barrier as a tiny all-reduce: it then goes through the same timeout as everything else.
    auto t = torch::zeros({1}, torch::TensorOptions().device(device_));
    all_reduce_sum(t, what);
  }

  void attach_gradient_sync(const std::vector<torch::Tensor>& params,
                            const std::vector<std::string>& names, double bucket_mb) override {
    const auto cap = static_cast<size_t>(bucket_mb * 1024 * 1024);
    const size_t first_cap =
        std::min<size_t>(cap, 1024 * 1024);  // as torch DDP: a small first bucket
    auto [buckets, limits] = c10d::compute_bucket_assignment_by_size(params, {first_cap, cap});
    // Gradients arrive roughly in reverse order of definition, so the last buckets go first.
    std::reverse(buckets.begin(), buckets.end());
    std::vector<int64_t> reversed_limits(limits.rbegin(), limits.rend());
    std::unordered_map<size_t, std::string> param_names;
    for (size_t i = 0; i < names.size(); ++i) param_names[i] = names[i];
    reducer_ = std::make_unique<c10d::Reducer>(
        params, buckets, group_, std::vector<bool>(params.size(), false), static_cast<int64_t>(cap),
        /*find_unused_parameters=*/false,
        // Gradients become views into the all-reduce buckets: no copy back after the all-reduce
        // (it would sit at the end of backward) and no second copy of the gradients in memory.
        /*gradient_as_bucket_view=*/true, param_names, static_cast<int64_t>(first_cap),
        /*skip_all_reduce_unused_params=*/false, /*use_python_reducer=*/false, reversed_limits);
    reducer_->register_comm_hook(std::make_unique<SumGradients>(group_));
  }

  void begin_synced_micro_step() override {
    if (!reducer_) return;
    reducer_->prepare_for_forward();
    if (reducer_->should_rebuild_buckets()) reducer_->rebuild_buckets();
    reducer_->prepare_for_backward({});
  }

 protected:
  void watch_begin(const char* what) override { watchdog_.begin(what); }
  void watch_end() override { watchdog_.end(); }

 private:
  template <class F>
  void run(const char* what, F&& start) {
    Watch watch(*this, what);
    try {
      auto work = start();
      work->wait();
    } catch (const std::exception& e) {
      throw collective_failure(env_.rank, what, e);
    }
  }

  torch::Device device_;
  Watchdog watchdog_;
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
  return std::make_unique<C10dCommunicator>(env, chosen, device, timeout_seconds);
}

}  // namespace kubetune::dist
