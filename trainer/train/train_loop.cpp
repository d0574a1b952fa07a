// The training loop, top to bottom:
//   set-up: process group, tokenizer, data, model (+LoRA), sampler, optimizer, resume
//   per optimizer step:
//     1. the rank's micro-batches for this step; all-reduce their target-token count once, so the
//        loss of every micro-batch on every rank is divided by the same global count
//     2. forward + backward per micro-batch; only the last one synchronises gradients (bucketed
//        all-reduce inside backward, overlapped with it on GPU; a trainable embedding's lookup
//        gradient is summed afterwards over the rows the global batch used)
//     3. clip, AdamW, learning-rate schedule; with a sharded optimizer (weight_shards.h) gradients
//        were reduce-scattered instead, each rank updates its slice and the slices are
//        all-gathered; with sharded weights too (full_sharding.h) each layer's weights are gathered
//        just before its forward and backward and its gradients reduce-scattered as soon as they
//        are ready
//     4. report; checkpoint
//   end: adapter or model folder, final checkpoint, final evaluation
//   SIGTERM/SIGINT on any rank: every rank stops after the same step, a checkpoint is written and
//   the run exits with kExitRetryable, to be resumed (stop_signal.h)
// run_training() is the set-up, then train_steps() (queue_step/finish_step per step) and
// finish_training().
#include "trainer/train/train_loop.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>

#include "common/contracts.h"
#include "common/log.h"
#include "kernels/fp8.h"
#include "trainer/data/dataset.h"
#include "trainer/data/sampler.h"
#include "trainer/dist/communicator.h"
#include "trainer/io/hf_checkpoint.h"
#include "trainer/io/peft_adapter.h"
#include "trainer/model/device_copy.h"
#include "trainer/model/lora.h"
#include "trainer/model/loss.h"
#include "trainer/train/adamw.h"
#include "trainer/train/batch_shape.h"
#include "trainer/train/checkpoint.h"
#include "trainer/train/device.h"
#include "trainer/train/embedding_gradient_sync.h"
#include "trainer/train/evaluate.h"
#include "trainer/train/flops.h"
#include "trainer/train/full_sharding.h"
#include "trainer/train/grad_clip.h"
#include "trainer/train/host_memory.h"
#include "trainer/train/lr_schedule.h"
#include "trainer/train/micro_batch.h"
#include "trainer/train/model_setup.h"
#include "trainer/train/observers.h"
#include "trainer/train/out_of_memory.h"
#include "trainer/train/preflight.h"
#include "trainer/train/profiler.h"
#include "trainer/train/resume_check.h"
#include "trainer/train/stop_signal.h"
#include "trainer/train/weight_shards.h"

namespace fs = std::filesystem;

namespace kubetune::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// c10's errors append a backtrace after the first line.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::optional<model::LoraConfig> lora_config(const TrainConfig& c) {
  if (!trains_adapters(c)) return std::nullopt;
  model::LoraConfig l;
  l.r = c.method.lora.r;
  l.alpha = c.method.lora.alpha;
  l.dropout = c.method.lora.dropout;
  l.target_modules = lora_target_modules(c.method.lora);
  return l;
}

// Biases and norm weights are not decayed (the HF Trainer's rule).
bool decays(const std::string& name, const torch::Tensor& p) {
  return p.dim() >= 2 && name.find("norm") == std::string::npos;
}

data::MicroBatch collate(const std::vector<data::Example>& examples,
                         const std::vector<size_t>& indices, const TrainConfig& c, int32_t pad_id) {
  std::vector<const data::Example*> picked;
  for (size_t i : indices) picked.push_back(&examples[i]);
  if (picked.empty()) return {};
  return c.data.packing ? data::pack_batch(picked, c.data.max_length, pad_id)
                        : data::pad_batch(picked, pad_id);
}

// The whole run's state that a step reads and writes.
struct Run {
  TrainConfig& config;  // training.microBatchSize changes when a step runs out of memory
  dist::Communicator& comm;
  torch::Device device;
  torch::Dtype dtype;
  model::CausalLM model;
  NamedParams trainable;
  AdamW optimizer;
  LrSchedule schedule;
  data::DistributedSampler sampler;
  std::vector<data::Example> train, validation;
  TextTools text;
  TrainerState state;
  std::vector<std::unique_ptr<TrainingObserver>> observers;
  // Called by a hook whenever a trainable parameter receives its gradient: the last call of a
  // step is when this rank's own backward ended and waiting for the other ranks began.
  std::shared_ptr<std::function<void()>> on_gradient;
  std::unique_ptr<EmbeddingGradientSync> embedding_sync;  // null: autograd + buckets
  std::unique_ptr<WeightShards> shards;                   // null: every rank updates everything
  std::unique_ptr<FullSharding> full_shards;              // null: every rank holds every weight
  int64_t checkpointed_step = -1;                         // the step the last checkpoint holds
  // This rank ran out of GPU memory: it votes to skip every step queued until all ranks have
  // read the vote and re-run the step (recover_from_out_of_memory).
  bool out_of_memory_pending = false;
};

// With gradient checkpointing, memory comes first: the loss's chunk of logits is then the largest
// allocation of the step after the weights (1 GiB for 4096 rows of Llama 3's vocabulary), so it
// is kept to a quarter of that (a few percent slower).
int64_t loss_chunk_rows(const Run& run) {
  const int64_t budget = recomputes_layers(run.config) ? (256LL << 20) : (1LL << 30);
  return model::loss_chunk_rows(run.model->config().vocab_size, budget);
}

void attach_gradient_probe(Run& run) {
  for (auto& t : run.trainable.tensors)
    t.register_hook([probe = run.on_gradient](const torch::Tensor&) {
      if (*probe) (*probe)();
    });
}

// A micro-batch with no examples (short tail of an epoch) still runs a backward through every
// trainable parameter, with zero gradients, so that the gradient all-reduce sees all ranks. It
// reads no values: fully sharded weights have none outside their layer's turn.
torch::Tensor zero_loss(const NamedParams& trainable) {
  auto total = torch::zeros({}, trainable.tensors.front().options());
  for (const auto& p : trainable.tensors) total = total + p.reshape(-1).narrow(0, 0, 0).sum();
  return total;
}

// Anything that reads the weights outside a forward (whose stages wait for their own buckets)
// waits for a sharded optimizer's gather first.
void wait_for_weights(Run& run) {
  if (run.shards) run.shards->wait_for_weights();
}

// Gradients are dropped, not zeroed (torch's set_to_none): the next backward then hands its
// gradient tensors over instead of adding them to zeros. All of them, also those of tensors this
// rank's sharded optimizer does not update: their gradients still feed the next reduction.
void drop_gradients(Run& run) {
  for (auto& t : run.trainable.tensors) t.mutable_grad() = torch::Tensor();
  if (run.full_shards) run.full_shards->drop_gradients();
}

// After each backward: fully sharded weights are dropped again.
void finish_backward(Run& run) {
  if (run.full_shards) run.full_shards->finish_backward();
}

// The gradients AdamW reads, clipped to the global norm. A sharded optimizer's slices are counted
// by their owners and whole tensors (the same on every rank) by rank 0 alone.
torch::Tensor clip_gradients(Run& run) {
  const bool split = run.shards || run.full_shards;
  std::vector<torch::Tensor> gradients, counted;
  for (const auto& p : run.optimizer.params()) {
    if (!p.param.grad().defined()) continue;
    gradients.push_back(p.values(p.param.grad()));
    if (!split || !p.whole() || run.comm.rank() == 0) counted.push_back(gradients.back());
  }
  std::function<void(torch::Tensor&)> sum;
  if (split) sum = [&](torch::Tensor& t) { run.comm.all_reduce_sum(t, "gradient norm"); };
  return clip_grad_norm(gradients, counted, run.config.training.max_grad_norm, sum);
}

UserInputError out_of_memory_in_sharded_step(const Run& run, const c10::OutOfMemoryError& e) {
  return UserInputError(
      "rank " + std::to_string(run.comm.rank()) + " ran out of GPU memory in step " +
      std::to_string(run.state.step + 1) + " (micro-batch " +
      std::to_string(micro_batch_size(run.config)) +
      ") with distributed.sharding full, whose every forward and backward gathers weights from "
      "the other processes, so the step cannot be re-run in place: set a smaller "
      "training.microBatchSize, model.gradientCheckpointing, or more processes (" +
      first_line(e.what()) + ")");
}

// With peers, a backward that runs out of memory may already have sent some gradient buckets, and
// the other ranks wait for the rest: the rank cannot rejoin the step, so the run stops here (the
// peers' collectives fail with it) and names what to change. An accumulation of two or more
// micro-batches meets the peak in a micro-batch that does not synchronise, where it recovers.
UserInputError out_of_memory_in_synced_backward(const Run& run, const c10::OutOfMemoryError& e) {
  return UserInputError(
      "rank " + std::to_string(run.comm.rank()) + " ran out of GPU memory in step " +
      std::to_string(run.state.step + 1) +
      " during the backward that reduces gradients across processes (micro-batch " +
      std::to_string(micro_batch_size(run.config)) +
      "), which cannot be re-run in place: set a smaller training.microBatchSize, or a "
      "training.globalBatchSize that gives two or more micro-batches per step (" +
      first_line(e.what()) + ")");
}

// A step whose work is queued on the device but whose results have not been read back yet. The
// loop reads a step back only after queueing the next one, so the GPU never idles while the host
// prints progress or prepares the next batch.
struct PendingStep {
  StepStats stats;
  torch::Tensor results;    // host copy: loss sum, global targets, global tokens, gradient norm
  DeviceTimeline timeline;  // marks, in order: kStart .. kResultsCopied
};
enum Mark : size_t { kStart, kLastGradient, kGradientsSynced, kWeightsUpdated, kResultsCopied };

PendingStep queue_step(Run& run) {
  PendingStep p{{}, {}, DeviceTimeline(run.device)};
  StepStats& s = p.stats;
  const auto step_start = Clock::now();
  const int64_t steps_per_epoch = run.sampler.steps_per_epoch();
  const int64_t epoch = run.state.step / steps_per_epoch;
  const int64_t step_in_epoch = run.state.step % steps_per_epoch;

  // 1. Data and the global normaliser, which stays on the device.
  std::vector<data::MicroBatch> micro;
  int64_t local_targets = 0;
  for (const auto& indices : run.sampler.micro_batches(epoch, step_in_epoch)) {
    micro.push_back(collate(run.train, indices, run.config, run.text.pad_id));
    local_targets += micro.back().n_targets;
    s.local_tokens += micro.back().n_tokens;
    s.local_samples += static_cast<int64_t>(indices.size());
  }
  if (run.embedding_sync)
    run.embedding_sync->begin_step(token_ids_in(
        run.train, run.sampler.global_batch_indices(epoch, step_in_epoch), run.text.pad_id));
  // The third count is how many ranks were asked to stop (stop_signal.h): every rank learns it
  // with this step's results, so all of them stop after the same step.
  const int64_t stop_vote = stop_requested() ? 1 : 0;
  auto counts = model::to_device_async(
      torch::tensor({local_targets, s.local_tokens, stop_vote}, torch::kInt64), run.device);
  run.comm.all_reduce_sum(counts, "target-token count");
  s.data_seconds = seconds_since(step_start);
  p.timeline.mark();  // kStart
  p.timeline.add();   // kLastGradient: recorded before the last backward, then by the hook

  // 2. Forward and backward. Gradients are summed over ranks, so each rank scales its summed
  // loss by 1/global_targets: the result is (sum over all targets) / global_targets.
  const torch::Tensor scale =
      (1.0 / counts[0].clamp_min(1).to(torch::kFloat64)).to(torch::kFloat32);
  torch::manual_seed(run.config.training.seed + 1000003ULL * run.state.step +
                     run.comm.rank());  // dropout
  auto loss_sum =
      torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(run.device));
  // A rank that runs out of GPU memory drops what the step computed and still takes part in the
  // step's collectives, with zero gradients; its vote (below) makes every rank skip the update.
  auto out_of_memory = [&](const c10::OutOfMemoryError& e, size_t m) {
    // Fully sharded, every forward and backward gathers from the peers: a rank that left one
    // half-way cannot rejoin it.
    if (run.full_shards && run.comm.world_size() > 1) throw out_of_memory_in_sharded_step(run, e);
    log::warn() << "rank " << run.comm.rank() << " ran out of GPU memory in step "
                << run.state.step + 1 << " (micro-batch " << m + 1 << " of " << micro.size() << ", "
                << micro[m].batch << " examples): " << first_line(e.what());
    run.out_of_memory_pending = true;
    loss_sum.zero_();
    drop_gradients(run);
    release_cached_memory(run.device);
  };
  for (size_t m = 0; m < micro.size(); ++m) {
    const bool last = m + 1 == micro.size();
    if (last) run.comm.begin_synced_micro_step();
    if (run.out_of_memory_pending && !last) continue;
    torch::Tensor loss;
    try {
      {  // autocast for the forward only: backward runs outside it (autograd's threads inherit it)
        AutocastScope autocast(run.device, run.dtype);
        if (micro[m].batch == 0 && run.full_shards && run.comm.world_size() > 1) {
          // Its peers gather and reduce layer by layer: this rank must do the same.
          loss = run.full_shards->zero_loss(
              torch::full({1}, static_cast<int64_t>(run.text.pad_id),
                          torch::TensorOptions().dtype(torch::kInt64).device(run.device)));
        } else if (micro[m].batch == 0 || run.out_of_memory_pending) {
          wait_for_weights(run);
          loss = zero_loss(run.trainable);
        } else {
          inject_test_out_of_memory(micro[m].batch, run.comm.rank());
          auto t = to_tensors(micro[m], run.device);
          auto hidden = run.model->hidden_states(t.input_ids, t.position_ids, t.segment_ids);
          auto [sum, n] =
              model::next_token_loss_sum(*run.model, hidden, t.labels, loss_chunk_rows(run));
          loss_sum += sum.detach().to(torch::kFloat64);
          loss = sum * scale;
        }
      }
      if (!last) {
        loss.backward();
        finish_backward(run);
      }
    } catch (const c10::OutOfMemoryError& e) {
      out_of_memory(e, m);
      if (!last) continue;
      AutocastScope autocast(run.device, run.dtype);
      wait_for_weights(run);
      loss = zero_loss(run.trainable);
    }
    if (!last) continue;
    dist::Communicator::Watch watch(run.comm, "gradient all-reduce (backward)");
    p.timeline.record(kLastGradient);
    *run.on_gradient = [&] { p.timeline.record(kLastGradient); };
    try {
      loss.backward();
      finish_backward(run);
    } catch (const c10::OutOfMemoryError& e) {
      *run.on_gradient = nullptr;
      // Alone, nothing was reduced yet. With peers, some gradient buckets may already be on their
      // way to the other ranks, which then wait for the rest: this rank cannot take part any more.
      if (run.comm.world_size() > 1) throw out_of_memory_in_synced_backward(run, e);
      out_of_memory(e, m);
    } catch (const std::exception& e) {
      *run.on_gradient = nullptr;
      if (run.comm.world_size() > 1 && dist::is_collective_failure(e))
        throw dist::collective_failure(run.comm.rank(), "gradient all-reduce (backward)", e);
      throw;
    }
    *run.on_gradient = nullptr;
  }
  if (run.embedding_sync) run.embedding_sync->finish_step();
  // The loss and whether any rank ran out of memory, summed in the step's one small all-reduce.
  // The vote stays on the device: the optimizer reads it there (a skipped update), the host with
  // the step's results, so no rank waits for it here.
  auto loss_and_vote = torch::stack(
      {loss_sum, torch::full({}, run.out_of_memory_pending ? 1.0 : 0.0, loss_sum.options())});
  run.comm.all_reduce_sum(loss_and_vote, "loss and out-of-memory vote");
  const torch::Tensor skip_vote = loss_and_vote[1].clamp_max(1).to(torch::kFloat32);
  p.timeline.mark();  // kGradientsSynced

  // 3. Update (none where some rank ran out of memory).
  const torch::Tensor grad_norm = clip_gradients(run);
  s.learning_rate = run.schedule.at(run.state.step);
  run.optimizer.step(s.learning_rate, skip_vote);
  if (run.shards) run.shards->start_weight_gather(run.comm);
  drop_gradients(run);
  p.timeline.mark();  // kWeightsUpdated

  p.results = model::to_host_async(
      torch::stack({loss_and_vote[0], counts[0].to(torch::kFloat64), counts[1].to(torch::kFloat64),
                    grad_norm.to(loss_sum.device(), torch::kFloat64), counts[2].to(torch::kFloat64),
                    loss_and_vote[1]}));
  p.timeline.mark();  // kResultsCopied

  run.state.step += 1;
  s.step = run.state.step;
  s.total_steps = run.schedule.total_steps;
  s.epoch = static_cast<double>(run.state.step) / steps_per_epoch;
  return p;
}

// Waits for a queued step and fills in what only the device knew.
StepStats finish_step(Run& run, PendingStep& p) {
  p.timeline.wait();
  StepStats s = p.stats;
  const auto* values = p.results.data_ptr<double>();
  s.global_targets = static_cast<int64_t>(values[1]);
  s.global_tokens = static_cast<int64_t>(values[2]);
  s.loss = values[0] / std::max<int64_t>(1, s.global_targets);
  s.grad_norm = values[3];
  s.stop_requested = values[4] > 0;
  s.out_of_memory = values[5] > 0;
  s.forward_backward_seconds = p.timeline.seconds_between(kStart, kLastGradient);
  s.allreduce_wait_seconds = p.timeline.seconds_between(kLastGradient, kGradientsSynced);
  s.optimizer_seconds = p.timeline.seconds_between(kGradientsSynced, kWeightsUpdated);
  if (s.out_of_memory) return s;  // nothing of it counts: it is run again
  run.state.tokens_seen += s.global_tokens;
  run.state.samples_seen += s.local_samples;  // this rank's; the global count is step x batch
  s.has_device_memory = device_memory(run.device, s.device_memory);
  return s;
}

void report_step(Run& run, StepStats& s, Clock::time_point start, int64_t first_step,
                 int64_t total_steps, double flops_per_token, double& smoothed_tps) {
  s.elapsed_seconds = seconds_since(start);
  const double per_step = s.elapsed_seconds / static_cast<double>(s.step - first_step);
  s.eta_seconds = per_step * static_cast<double>(total_steps - s.step);
  const double tps = s.local_tokens / std::max(1e-9, s.step_seconds);
  smoothed_tps = smoothed_tps == 0 ? tps : 0.8 * smoothed_tps + 0.2 * tps;
  s.tokens_per_second = smoothed_tps;
  if (run.device.is_cuda()) s.mfu = smoothed_tps * flops_per_token / kPeakBf16FlopsPerSecond;
  for (auto& o : run.observers) o->on_step(s);
}

// Every rank read the same vote: some rank ran out of GPU memory in the step after `rerun_from`.
// The steps queued since changed no weight (the optimizer skipped them on the device); they are
// forgotten and the step runs again with half the micro-batch (or the next divisor below) and more
// accumulation, so the global batch and the update are what they would have been.
void recover_from_out_of_memory(Run& run, int64_t rerun_from) {
  const int64_t failed_step = rerun_from + 1, before = micro_batch_size(run.config);
  run.optimizer.undo_steps(run.state.step - rerun_from);
  run.state.step = rerun_from;
  run.out_of_memory_pending = false;
  release_cached_memory(run.device);
  const int world = run.comm.world_size();
  const int64_t per_process = run.state.global_batch / world;
  const int64_t smaller = smaller_micro_batch(per_process, before);
  if (smaller == 0) {
    std::ostringstream what;
    what << "step " << failed_step
         << " ran out of GPU memory at micro-batch 1: the model and one sequence of data.maxLength "
            "do not fit (try model.gradientCheckpointing or model.offloadCheckpoints, a shorter "
            "data.maxLength, method.type qlora, or more GPUs with distributed.sharding full); "
            "nothing of this step is saved";
    if (run.checkpointed_step > 0)
      what << "; the last checkpoint is at step " << run.checkpointed_step;
    throw UserInputError(what.str());
  }
  set_micro_batch_size(run.config, smaller);
  const int64_t accumulation = per_process / smaller;
  run.sampler = data::DistributedSampler(run.train.size(), run.state.global_batch,
                                         static_cast<int>(accumulation), run.comm.rank(), world,
                                         run.config.training.seed, run.config.data.shuffle);
  if (run.comm.rank() == 0)
    log::warn() << "step " << failed_step << " ran out of GPU memory at micro-batch " << before
                << ": running it again at micro-batch " << smaller << " x " << accumulation
                << " accumulation (global batch " << run.state.global_batch
                << " and the update unchanged)";
  for (auto& o : run.observers) o->on_micro_batch(smaller, accumulation, true);
}

// A NaN or infinite loss or gradient norm never recovers: every later step, checkpoint and output
// would be NaN while the run "succeeds". The values are global (all-reduced), so every rank stops
// here together; the last checkpoint, written before, stays the one to resume from.
void stop_if_diverged(const Run& run, const StepStats& s) {
  if (std::isfinite(s.loss) && std::isfinite(s.grad_norm)) return;
  std::ostringstream what;
  what
      << "step " << s.step << ": loss " << s.loss << ", gradient norm " << s.grad_norm
      << ": training diverged or its inputs hold NaN/inf (check training.learningRate, the model's "
         "weights and config.json); nothing of this step is saved";
  if (run.checkpointed_step > 0)
    what << "; the last checkpoint is at step " << run.checkpointed_step;
  throw UserInputError(what.str());
}

// A trainable embedding of a multi-process run has its gradient summed by rows
// (embedding_gradient_sync.h). Untied, it then leaves DDP's buckets; tied, the buckets still
// carry the output layer's part.
// How the weights are updated once their gradients exist: the reductions between ranks and the
// optimizer. Made once the weights are final (restored, broadcast), before the Run that uses it.
struct WeightUpdate {
  std::unique_ptr<EmbeddingGradientSync> embedding_sync;  // null: autograd + buckets
  std::unique_ptr<WeightShards> shards;                   // null: every rank updates everything
  std::unique_ptr<FullSharding> full_shards;              // null: every rank holds every weight
  AdamW optimizer;
};

std::unique_ptr<EmbeddingGradientSync> embedding_sync_by_rows(const TrainConfig& c,
                                                              dist::Communicator& comm,
                                                              model::CausalLM& model) {
  auto& embedding = model->model->embed_tokens;
  // Fully sharded, the embedding's gradient is reduce-scattered with the rest of its unit.
  if (comm.world_size() > 1 && c.distributed.sparse_embedding_gradients &&
      c.distributed.sharding != api::DistributedSharding::kFull &&
      embedding->weight.requires_grad())
    return std::make_unique<EmbeddingGradientSync>(embedding, comm);
  return nullptr;
}

// The tensors DDP's buckets reduce, in the order backward produces their gradients (buckets go
// in order, each once all its gradients are ready): the reverse of the model's order. A tied
// embedding summed by rows gets from autograd only the output layer's part, which comes first;
// an untied one leaves the buckets.
NamedParams bucketed_in_gradient_order(model::CausalLM& model, const NamedParams& trainable,
                                       bool embedding_by_rows, const FullSharding* full_shards) {
  const auto& embedding = model->model->embed_tokens->weight;
  NamedParams out;
  for (size_t k = trainable.tensors.size(); k-- > 0;) {
    const auto& t = trainable.tensors[k];
    if (full_shards && full_shards->holds(t)) continue;  // reduce-scattered by its unit
    if (embedding_by_rows && t.is_same(embedding)) {
      if (model->lm_head) continue;
      out.names.insert(out.names.begin(), trainable.names[k]);
      out.tensors.insert(out.tensors.begin(), t);
      continue;
    }
    out.names.push_back(trainable.names[k]);
    out.tensors.push_back(t);
  }
  return out;
}

// AdamW's parameters: a sharded optimizer's slices of the bucketed tensors, fully sharded
// tensors' slices, and whole tensors for everything else.
std::vector<AdamWParam> optimizer_entries(const NamedParams& trainable, const NamedParams& bucketed,
                                          WeightShards* shards, FullSharding* full_shards) {
  std::vector<AdamWParam> entries;
  if (shards) entries = shards->optimizer_entries(decays);
  if (full_shards) entries = full_shards->optimizer_entries(decays);
  for (size_t i = 0; i < trainable.tensors.size(); ++i) {
    const auto& t = trainable.tensors[i];
    const bool in_shards =
        (shards && std::any_of(bucketed.tensors.begin(), bucketed.tensors.end(),
                               [&](const torch::Tensor& b) { return b.is_same(t); })) ||
        (full_shards && full_shards->holds(t));
    if (!in_shards)
      entries.push_back({trainable.names[i], t, decays(trainable.names[i], t), {}, {}});
  }
  return entries;
}

// The stage of CausalLMImpl::before_stage that first reads the tensor `name`.
int64_t model_stage_of(const std::string& name, int64_t layers) {
  if (name.rfind("model.embed_tokens.", 0) == 0) return -1;
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) == 0) return std::stoll(name.substr(prefix.size()));
  return layers;  // the final norm and the output layer
}

WeightUpdate set_up_weight_update(const TrainConfig& c, dist::Communicator& comm,
                                  model::CausalLM& model, const NamedParams& trainable) {
  auto embedding_sync = embedding_sync_by_rows(c, comm, model);
  // Fully sharded: every weight (full), or the frozen base (lora: the adapters stay whole).
  std::unique_ptr<FullSharding> full_shards;
  if (c.distributed.sharding == api::DistributedSharding::kFull) {
    const bool full = c.method.type == api::MethodType::kFull;
    full_shards = std::make_unique<FullSharding>(
        model, comm, [full](const torch::Tensor& t) { return full || !t.requires_grad(); });
  }
  const NamedParams bucketed =
      bucketed_in_gradient_order(model, trainable, embedding_sync != nullptr, full_shards.get());
  const auto plan = bucketed.tensors.empty() ? dist::BucketPlan{}
                                             : dist::plan_gradient_buckets(
                                                   bucketed.tensors, c.distributed.bucket_size_mb);
  std::unique_ptr<WeightShards> shards;
  if (comm.world_size() > 1 && c.distributed.sharding == api::DistributedSharding::kOptimizer) {
    const int64_t layers = model->config().num_hidden_layers;
    shards = std::make_unique<WeightShards>(
        bucketed.tensors, bucketed.names, plan, comm.rank(), comm.world_size(),
        [layers](const std::string& name) { return model_stage_of(name, layers); });
    model->before_stage = [s = shards.get()](int64_t stage) { s->wait_for_stage(stage); };
  }
  AdamW optimizer(optimizer_entries(trainable, bucketed, shards.get(), full_shards.get()),
                  {c.training.adam_beta1, c.training.adam_beta2, c.training.adam_epsilon,
                   c.training.weight_decay});
  if (!bucketed.tensors.empty())
    comm.attach_gradient_sync(bucketed.tensors, bucketed.names, plan,
                              shards ? dist::Communicator::Reduction::kReduceScatter
                                     : dist::Communicator::Reduction::kAllReduce);
  return {std::move(embedding_sync), std::move(shards), std::move(full_shards),
          std::move(optimizer)};
}

NamedTensors named(const NamedParams& p) {
  NamedTensors out;
  for (size_t i = 0; i < p.names.size(); ++i) out.emplace_back(p.names[i], p.tensors[i]);
  return out;
}

// The trainable tensors' values for a checkpoint: fully sharded ones gathered (a collective;
// only rank 0 gets them).
NamedTensors trainable_weights(Run& run) {
  if (!run.full_shards) return named(run.trainable);
  const auto gathered = run.full_shards->gather_weights(run.comm.rank() == 0, true);
  NamedTensors out;
  for (size_t i = 0; i < run.trainable.names.size(); ++i) {
    const auto it = gathered.find(run.trainable.names[i]);
    out.emplace_back(run.trainable.names[i],
                     it != gathered.end() ? it->second : run.trainable.tensors[i]);
  }
  return out;
}

void write_checkpoint(Run& run) {
  wait_for_weights(run);
  auto optimizer_state = run.optimizer.state();
  if (run.shards || run.full_shards) {  // a collective: every rank takes part
    const bool keep = run.comm.rank() == 0;
    auto gathered = run.shards ? run.shards->gather_optimizer_state(run.comm, keep)
                               : run.full_shards->gather_optimizer_state(keep);
    optimizer_state.insert(optimizer_state.end(), gathered.begin(), gathered.end());
  }
  const NamedTensors weights = trainable_weights(run);
  if (run.comm.rank() == 0) {
    const auto lora = lora_config(run.config);
    auto path =
        save_checkpoint(checkpoint_dir(run.config), run.state, weights, optimizer_state,
                        [&](const std::string& tmp) {
                          if (lora)
                            io::save_peft_adapter(run.model, *lora, run.config.model.path, tmp);
                        });
    prune_checkpoints(checkpoint_dir(run.config), run.config.checkpoint.keep_last);
    for (auto& o : run.observers) o->on_checkpoint(run.state.step, path);
  }
  run.comm.barrier("checkpoint written");
  run.checkpointed_step = run.state.step;
}

// The checkpoint was checked to fit (resume_check.h): names and shapes match.
void restore_weights(NamedParams& trainable, const CheckpointContents& c) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(c.trainable.begin(), c.trainable.end());
  for (size_t i = 0; i < trainable.names.size(); ++i)
    trainable.tensors[i].copy_(by_name.at(trainable.names[i]));
}

// Where the run starts: step 0, or the counters of the checkpoint it resumes from.
TrainerState start_state(const TrainConfig& c, const BatchShape& shape, int world_size,
                         const std::optional<CheckpointContents>& checkpoint) {
  TrainerState state;
  if (checkpoint) {
    state.step = checkpoint->state.step;
    state.tokens_seen = checkpoint->state.tokens_seen;
    state.samples_seen = checkpoint->state.samples_seen;
  }
  state.global_batch = shape.global_batch;
  state.world_size = world_size;
  state.seed = c.training.seed;
  state.method = api::to_string(c.method.type);
  return state;
}

void restore_optimizer(Run& run, const CheckpointContents& c) {
  std::map<std::string, torch::Tensor> opt(c.optimizer.begin(), c.optimizer.end());
  run.optimizer.load_state([&](const std::string& name) {
    auto it = opt.find(name);
    if (it == opt.end())
      throw std::runtime_error(c.path + ": optimizer state lacks '" + name + "'");
    return it->second;
  });
}

// The checkpoint this run resumes from: the newest one that is intact and fits, an explicit one,
// or none. Checkpoints that exist but cannot be resumed are the user's to sort out (exit 2).
std::optional<CheckpointContents> find_resume_point(const TrainConfig& c,
                                                    const ResumeCheck& fits_run) {
  if (c.checkpoint.resume == "never") return std::nullopt;
  try {
    if (c.checkpoint.resume == "auto") return load_latest_checkpoint(checkpoint_dir(c), fits_run);
    auto checkpoint = load_checkpoint(c.checkpoint.resume);
    fits_run(checkpoint);
    return checkpoint;
  } catch (const CheckpointUnusable& e) {
    throw UserInputError(c.checkpoint.resume == "auto"
                             ? e.what()
                             : "checkpoint.resume " + c.checkpoint.resume + ": " + e.what());
  }
}

// Rank 0 picks and verifies the checkpoint and tells the others its step, which they load without
// hashing it again: every rank resumes the same step even if a shared volume looks different to
// them for a moment, and a refusal stops all of them together rather than leaving some waiting.
std::optional<CheckpointContents> agree_on_resume_point(dist::Communicator& comm,
                                                        const TrainConfig& c,
                                                        const torch::Device& device,
                                                        const ResumeCheck& fits_run) {
  constexpr int64_t kNone = -1, kRefused = -2;
  std::optional<CheckpointContents> found;
  std::string refusal;
  int64_t step = kNone;
  if (comm.rank() == 0) {
    try {
      found = find_resume_point(c, fits_run);
      if (found) step = found->state.step;
    } catch (const UserInputError& e) {
      refusal = e.what();
      step = kRefused;
    }
  }
  std::vector<torch::Tensor> message{torch::tensor({step}, torch::kInt64).to(device)};
  comm.broadcast(message, 0, "resume step");
  step = message[0].item<int64_t>();
  if (step == kRefused)
    throw UserInputError(comm.rank() == 0 ? refusal
                                          : "rank 0 refused the checkpoints (its log says why)");
  if (comm.rank() == 0 || step == kNone) return found;
  return load_checkpoint(c.checkpoint.resume == "auto" ? checkpoint_path(checkpoint_dir(c), step)
                                                       : c.checkpoint.resume,
                         /*verify_files=*/false);
}

void save_outputs(Run& run) {
  wait_for_weights(run);
  const auto& c = run.config;
  const auto lora = lora_config(c);
  const bool random_base = c.model.init == api::ModelInit::kRandom;
  // Fully sharded weights the outputs read, gathered to rank 0's host (a collective).
  std::map<std::string, torch::Tensor> gathered;
  if (run.full_shards && (!lora || (c.output.save_merged && random_base)))
    gathered = run.full_shards->gather_weights(run.comm.rank() == 0, false);
  const io::ParameterValue value_of = [&](const std::string& name, const torch::Tensor& t) {
    const auto it = gathered.find(name);
    return it == gathered.end() ? t : it->second;
  };
  if (run.comm.rank() != 0) return;
  fs::create_directories(c.output.dir);
  if (lora) {
    io::save_peft_adapter(run.model, *lora, c.model.path, c.output.dir);
    if (c.output.save_merged) {
      // The base weights in full precision come from the folder again; randomly initialised
      // ones exist only here (drawn in their storage dtype, so the copy is exact).
      auto merged = load_model(c.model.path, torch::Device(torch::kCPU), torch::kFloat32, lora,
                               false, c.training.seed, std::nullopt, c.model.init);
      torch::NoGradGuard no_grad;
      auto ours = run.model->named_parameters();
      for (auto& item : merged->named_parameters())
        if (item.value().requires_grad() || random_base)
          item.value().copy_(value_of(item.key(), ours[item.key()]).to(torch::kCPU));
      model::merge_lora(merged);
      io::save_hf_model(merged, c.output.dir + "/merged", torch::kFloat32);
      io::copy_tokenizer_files(c.model.path, c.output.dir + "/merged");
    }
  } else {
    io::save_hf_model(run.model, c.output.dir, torch::kFloat32, 5'000'000'000, value_of);
    io::copy_tokenizer_files(c.model.path, c.output.dir);
  }
  log::info() << "saved " << (lora ? "PEFT adapter" : "model") << " output=" << c.output.dir;
}

double run_validation(Run& run) {
  wait_for_weights(run);
  auto result = evaluate(*run.model, run.validation, micro_batch_size(run.config), run.text.pad_id,
                         run.device, run.dtype, &run.comm);
  if (run.full_shards) run.full_shards->release();
  return result.mean_loss;
}

struct UserInputs {
  TextTools text;
  std::vector<data::Example> train, validation;
  model::CausalLM model;
};

// Offloaded checkpoints that would not fit the host's memory (`processes` trainers pin theirs on
// this machine): an error now, before the model loads, not a silent kill at the first step.
void check_host_memory_for_offload(const TrainConfig& c, const torch::Device& device,
                                   int processes) {
  if (!c.model.offload_checkpoints || !device.is_cuda()) return;
  TrainConfig smallest = c;  // microBatchSize auto is chosen later, from the GPU: at least 1
  if (micro_batch_is_auto(smallest)) set_micro_batch_size(smallest, 1);
  const int64_t need =
      offloaded_checkpoint_bytes(model::ModelConfig::from_dir(c.model.path), smallest);
  const auto available = available_host_memory();
  if (!available) return;
  if (auto error = offload_host_memory_error(need, processes, *available))
    throw std::runtime_error(*error);
  log::info() << "model.offloadCheckpoints: " << (need >> 20) << " MiB of pinned host memory per "
              << "process, " << (*available >> 20) << " MiB available";
}

// Everything read from the user's files: a failure here is theirs to fix, not ours to retry.
UserInputs load_user_inputs(const TrainConfig& c, const torch::Device& device, torch::Dtype dtype,
                            int local_processes) {
  try {
    check_host_memory_for_offload(c, device, local_processes);
    auto text = load_text_tools(c.model.path);
    auto options = dataset_options(c);
    auto train = data::load_jsonl(c.data.train, text.tokenizer, text.chat.get(), options);
    std::vector<data::Example> validation;
    if (c.data.validation)
      validation = data::load_jsonl(*c.data.validation, text.tokenizer, text.chat.get(), options);
    const bool qlora = c.method.type == api::MethodType::kQlora;
    const bool fp8 = c.model.precision == api::ModelPrecision::kFp8;
    if ((qlora || (fp8 && trains_adapters(c))) && c.model.init == api::ModelInit::kRandom &&
        c.output.save_merged)
      throw std::runtime_error(
          std::string("output.saveMerged: a merged model needs the base weights in full "
                      "precision, and with model.init random and ") +
          (qlora ? "method.type qlora they exist only in 4 bits"
                 : "model.precision fp8 they exist only in FP8"));
    if (fp8 && !kernels::fp8_supported_on(device))
      throw std::runtime_error(
          "model.precision fp8 needs an NVIDIA GPU of compute capability 9.0 "
          "(Hopper) or newer; " +
          device.str() + " is older: use model.precision default");
    torch::manual_seed(c.training.seed);
    auto model = load_model(
        c.model.path, device, dtype, lora_config(c), c.method.type == api::MethodType::kFull,
        c.training.seed, qlora ? std::optional(c.method.quantization) : std::nullopt, c.model.init);
    if (fp8) {
      // The decoder layers only: the LM head's product stays in bf16, as torchao's recipes leave
      // it.
      int64_t layers = 0;
      for (auto& [prefix, part] : model->parts())
        if (std::dynamic_pointer_cast<kubetune::model::DecoderLayerImpl>(part))
          layers += kubetune::model::use_fp8_products(*part);
      log::info() << "model.precision fp8: " << layers
                  << " decoder linear layers take their products in FP8 E4M3";
    }
    return {std::move(text), std::move(train), std::move(validation), model};
  } catch (const std::exception& e) {
    throw UserInputError(e.what());
  }
}

// What is trained, how and where, in one line of the log.
void log_start(const Run& run, const BatchShape& shape, int64_t total_steps) {
  const TrainConfig& c = run.config;
  log::info() << "training " << c.method.type << " on " << run.train.size()
              << " examples: " << total_steps << " steps, global batch " << shape.global_batch
              << " (" << micro_batch_size(c) << " x " << shape.accumulation << " accumulation x "
              << run.comm.world_size() << " processes), " << run.trainable.names.size()
              << " trainable tensors, device " << run.device.str() << ", backend "
              << run.comm.backend_name()
              << (run.shards ? ", optimizer sharded across processes (" +
                                   std::to_string(run.shards->sharded_buckets()) + " of " +
                                   std::to_string(run.shards->buckets()) + " buckets)"
                             : "")
              << (run.full_shards ? ", weights fully sharded across processes (" +
                                        run.full_shards->describe() + ")"
                                  : "");
}

// The optimizer steps from where the run stands to total_steps, with evaluations and checkpoints
// on their schedule; returns the last step's stats.
StepStats train_steps(Run& run, int64_t total_steps) {
  const TrainConfig& c = run.config;
  const double flops_per_token = model_flops_per_token(c, run.model->config());
  const auto start = Clock::now();
  const int64_t first_step = run.state.step;
  StepStats last;
  double smoothed_tps = 0;
  StepProfiler profiler(c.output.dir, run.comm.rank());
  auto evaluates_after = [&](int64_t step) {
    return c.training.eval_every_steps > 0 && !run.validation.empty() && step < total_steps &&
           step % c.training.eval_every_steps == 0;
  };
  auto checkpoints_after = [&](int64_t step) {
    return c.checkpoint.every_steps > 0 && step < total_steps &&
           step % c.checkpoint.every_steps == 0;
  };
  // A step that ends in an evaluation, a checkpoint or the end of training must be read back
  // before the next one changes the weights (and one at the edge of a profile, so the trace holds
  // only the profiled steps); any other step is read back while the next one runs.
  auto needs_weights = [&](int64_t step) {
    return step == total_steps || evaluates_after(step) || checkpoints_after(step) ||
           profiler.drains_after(step);
  };
  std::optional<PendingStep> pending;
  std::optional<DeviceTimeline> previous;  // of the step read back last
  bool stopping = false;  // a rank was asked to stop: finish what is queued, queue nothing more
  while ((run.state.step < total_steps && !stopping) || pending) {
    std::optional<PendingStep> next;
    if (run.state.step < total_steps && !stopping &&
        !(pending && needs_weights(pending->stats.step))) {
      profiler.before_step(run.state.step + 1);
      next = queue_step(run);
    }
    if (pending) {
      last = finish_step(run, *pending);
      if (last.out_of_memory) {
        if (next) finish_step(run, *next);  // skipped too: the rank that ran out voted again
        recover_from_out_of_memory(run, last.step - 1);
        pending.reset();
        previous.reset();
        continue;
      }
      const bool trace_written = profiler.after_step(last.step);
      // The pace steps complete at on the device: with steps overlapping, host clocks around a
      // read-back would mostly measure when the host got round to it.
      // After a pause (start, evaluation, checkpoint) it is the step's own span.
      last.step_seconds =
          previous ? pending->timeline.seconds_since(*previous, kResultsCopied, kResultsCopied)
                   : last.data_seconds + pending->timeline.seconds_between(kStart, kResultsCopied);
      previous = std::move(pending->timeline);
      report_step(run, last, start, first_step, total_steps, flops_per_token, smoothed_tps);
      stop_if_diverged(run, last);
      stopping = stopping || last.stop_requested;
      // Writing a trace (about half a second) pauses the run as an evaluation does: the next
      // step's time is its own span, not the pause.
      if (trace_written) previous.reset();
      if (evaluates_after(last.step)) {
        double eval_loss = run_validation(run);
        for (auto& o : run.observers) o->on_eval(last.step, eval_loss);
        previous.reset();
      }
      if (checkpoints_after(last.step)) {
        write_checkpoint(run);
        previous.reset();
      }
    }
    pending = std::move(next);
  }
  return last;
}

// Asked to stop before the end: the checkpoint to resume from, then the retryable exit.
int stop_early(Run& run, int64_t total_steps) {
  if (run.checkpointed_step != run.state.step) write_checkpoint(run);
  if (run.comm.rank() == 0) {
    log::warn() << "stopping at step=" << run.state.step << "/" << total_steps
                << " on request (SIGTERM/SIGINT): checkpoint written to "
                << checkpoint_dir(run.config) << "; a restart resumes from it";
  }
  return kExitRetryable;
}

// The preflight's estimate of this process's peak GPU memory (preflight.h), logged before the
// first step and again beside the measured peak at the end, so a wrong estimate shows.
void log_gpu_memory(const Run& run, const StepStats* last) {
  if (!run.device.is_cuda() || run.comm.rank() != 0) return;
  const MemoryEstimate m =
      estimate_gpu_memory(run.model->config(), run.config, run.comm.world_size());
  if (last == nullptr) {
    log::info() << "estimated peak GPU memory=" << log::fixed(m.total() / kGiB, 2) << " GiB "
                << nlohmann::json(m.to_report()).dump();
  } else if (last->has_device_memory) {
    log::info() << "peak GPU memory=" << log::fixed(last->device_memory.peak / kGiB, 2)
                << " GiB (estimated " << log::fixed(m.total() / kGiB, 2) << " GiB)";
  }
}

// The final checkpoint, the outputs, the last evaluation; every observer hears of the end.
void finish_training(Run& run, StepStats last) {
  log_gpu_memory(run, &last);
  if (run.full_shards && run.comm.rank() == 0)
    log::info() << "fully sharded weights: " << run.full_shards->peak_report();
  write_checkpoint(run);
  save_outputs(run);
  if (!run.validation.empty()) {
    last.eval_loss = run_validation(run);
    for (auto& o : run.observers) o->on_eval(run.state.step, *last.eval_loss);
  }
  for (auto& o : run.observers) o->on_finish(last);
  run.comm.barrier("end of training");
}

}  // namespace

// training.microBatchSize auto is chosen from rank 0's GPU and taken by every rank (a gang's GPUs
// are alike, and the ranks' micro-batches must be cut the same way); a number stays as it is.
MicroBatchChoice agree_on_micro_batch(dist::Communicator& comm, TrainConfig& c,
                                      const model::ModelConfig& model, const torch::Device& device,
                                      int64_t resumed_global_batch) {
  const bool automatic = micro_batch_is_auto(c);
  std::optional<int64_t> gpu_memory;
  if (DeviceMemory memory; device_memory(device, memory) && memory.total > 0)
    gpu_memory = memory.total;
  MicroBatchChoice choice = resolve_micro_batch(
      c, model, comm.world_size(),
      configured_global_batch(c, comm.world_size(), resumed_global_batch), gpu_memory);
  if (!automatic) return choice;
  std::vector<torch::Tensor> size{torch::tensor({choice.size}, torch::kInt64).to(device)};
  comm.broadcast(size, 0, "micro-batch size");
  if (size[0].item<int64_t>() != choice.size) {
    choice.accumulation = choice.accumulation * choice.size / size[0].item<int64_t>();
    choice.size = size[0].item<int64_t>();
    choice.reason = "rank 0's choice";
    set_micro_batch_size(c, choice.size);
  }
  if (comm.rank() == 0)
    log::info() << "training.microBatchSize auto: " << choice.size << " x " << choice.accumulation
                << " accumulation: " << choice.reason;
  return choice;
}

int run_training(const TrainConfig& configured) {
  TrainConfig c = configured;  // with training.microBatchSize resolved, and lowered after an OOM
  install_stop_handlers();
  const auto env = dist::DistEnv::from_environment();
  const auto device = pick_device(env.local_rank);
  if (device.is_cuda()) torch::cuda::synchronize(device.index());  // fail early on a bad device
  const auto dtype = compute_dtype(c.model.dtype, device);
  auto comm = dist::Communicator::create(env, api::to_string(c.distributed.backend), device,
                                         c.distributed.timeout_seconds);
  const bool lead = env.rank == 0;

  auto inputs = load_user_inputs(c, device, dtype, env.local_world_size);
  auto model = inputs.model;
  auto trainable = trainable_parameters(*model);
  auto checkpoint = agree_on_resume_point(*comm, c, device, [&](const CheckpointContents& k) {
    check_resumable(k, c, trainable, env.world_size, inputs.train.size());
  });
  apply_test_memory_cap(device, env.rank);
  const int64_t resumed_global_batch = checkpoint ? checkpoint->state.global_batch : 0;
  const MicroBatchChoice micro_batch =
      agree_on_micro_batch(*comm, c, model->config(), device, resumed_global_batch);
  const auto shape = batch_shape(c, env.world_size, resumed_global_batch);
  data::DistributedSampler sampler(inputs.train.size(), shape.global_batch, shape.accumulation,
                                   env.rank, env.world_size, c.training.seed, c.data.shuffle);
  const int64_t total_steps = train::total_steps(c, sampler.steps_per_epoch());
  LrSchedule schedule{c.training.lr_scheduler, c.training.learning_rate,
                      c.training.warmup_steps > 0
                          ? c.training.warmup_steps
                          : static_cast<long>(std::ceil(c.training.warmup_ratio * total_steps)),
                      total_steps};

  model->set_gradient_checkpointing(recomputes_layers(c));
  model->set_checkpoint_offload(c.model.offload_checkpoints && device.is_cuda());
  if (checkpoint) restore_weights(trainable, *checkpoint);
  // Every rank starts from rank 0's weights, whatever happened before (as torch DDP does).
  comm->broadcast(trainable.tensors, 0, "initial weights");
  WeightUpdate update = set_up_weight_update(c, *comm, model, trainable);

  Run run{c,
          *comm,
          device,
          dtype,
          model,
          trainable,
          std::move(update.optimizer),
          schedule,
          std::move(sampler),
          std::move(inputs.train),
          std::move(inputs.validation),
          std::move(inputs.text),
          start_state(c, shape, env.world_size, checkpoint),
          make_observers(c, env, device),
          std::make_shared<std::function<void()>>(),
          std::move(update.embedding_sync),
          std::move(update.shards),
          std::move(update.full_shards)};
  if (checkpoint) {
    restore_optimizer(run, *checkpoint);
    if (lead) {
      log::info() << "resuming from " << checkpoint->path << " at step=" << run.state.step << "/"
                  << total_steps;
    }
    checkpoint.reset();  // free the host copies
  }
  attach_gradient_probe(run);
  for (auto& o : run.observers) o->on_micro_batch(micro_batch.size, shape.accumulation, false);

  if (lead) log_start(run, shape, total_steps);
  log_gpu_memory(run, nullptr);
  const StepStats last = train_steps(run, total_steps);
  if (run.state.step < total_steps) return stop_early(run, total_steps);
  finish_training(run, last);
  return 0;
}

}  // namespace kubetune::train
