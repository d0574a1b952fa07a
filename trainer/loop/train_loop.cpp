// The training run, top to bottom (run_training):
//   set-up: process group, tokenizer, data, model (+LoRA), sampler, weight sync and optimizer,
//     resume (run_setup.h)
//   per optimizer step (step.cpp): data, forward + backward, gradient synchronisation, update
//     (queue_step), read back while the next step runs (finish_step); report; evaluation and
//     checkpoint on their schedule (outputs.h)
//   end: final checkpoint, adapter or model folder, final evaluation
//   SIGTERM/SIGINT on any rank: every rank stops after the same step, a checkpoint is written and
//   the run exits with kExitRetryable, to be resumed (stop_signal.h)
#include "trainer/loop/train_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <optional>

#include "common/contracts.h"
#include "common/log.h"
#include "common/preference_refusals.h"
#include "trainer/data/preference_pair.h"
#include "trainer/device/device.h"
#include "trainer/device/out_of_memory.h"
#include "trainer/inputs/user_input_error.h"
#include "trainer/loop/outputs.h"
#include "trainer/loop/preference.h"
#include "trainer/loop/run_setup.h"
#include "trainer/loop/step.h"
#include "trainer/loop/stop_signal.h"
#include "trainer/metrics/profiler.h"
#include "trainer/plan/flops.h"
#include "trainer/plan/memory_model.h"

namespace kubetune::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void attach_gradient_probe(Run& run) {
  for (auto& t : run.trainable.tensors)
    t.register_hook([probe = run.on_gradient](const torch::Tensor&) {
      if (*probe) (*probe)();
    });
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

// What is trained, how and where, in one line of the log.
void log_start(const Run& run, const BatchShape& shape, int64_t total_steps) {
  const TrainConfig& c = run.config;
  const std::string sync = run.weight_sync->describe();
  log::info() << "training " << c.method.type << " on " << run.train.size()
              << " examples: " << total_steps << " steps, global batch " << shape.global_batch
              << " (" << micro_batch_size(c) << " x " << shape.accumulation << " accumulation x "
              << run.comm.world_size() << " processes), " << run.trainable.names.size()
              << " trainable tensors, device " << run.device.str() << ", backend "
              << run.comm.backend_name() << (sync.empty() ? "" : ", " + sync);
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

// The preflight's estimate of this process's peak GPU memory (trainer/plan/memory_model.h), logged
// before the first step and again beside the measured peak at the end, so a wrong estimate shows.
void log_gpu_memory(const Run& run, const StepStats* last) {
  if (!run.device.is_cuda() || run.comm.rank() != 0) return;
  const MemoryEstimate m =
      estimate_gpu_memory(run.model->config(), run.config, run.comm.world_size());
  if (last == nullptr) {
    log::info() << "estimated peak GPU memory=" << log::fixed(m.total() / kGiB, 2) << " GiB "
                << nlohmann::json(m.to_report()).dump();
    // What loading took (under sharding full its own peak: memory.loadingGiB).
    if (DeviceMemory memory; device_memory(run.device, memory))
      log::info() << "peak GPU memory while loading=" << log::fixed(memory.peak / kGiB, 2)
                  << " GiB, now " << log::fixed(memory.allocated / kGiB, 2) << " GiB";
  } else if (last->has_device_memory) {
    log::info() << "peak GPU memory=" << log::fixed(last->device_memory.peak / kGiB, 2)
                << " GiB (estimated " << log::fixed(m.total() / kGiB, 2) << " GiB)";
  }
}

// kto's KL sequences, in blocks of the global batch (preference_pair.h), held-out examples too.
// One example alone would be its own KL sequence, making the KL term its reward: TRL refuses it.
void attach_kl_sequences(const TrainConfig& c, int64_t global_batch, UserInputs& inputs) {
  if (global_batch < 2)
    throw UserInputError(std::string(kKtoNeedsTwoExamplesPerStep) + " (it is " +
                         std::to_string(global_batch) + ")");
  const auto block = static_cast<size_t>(global_batch);
  data::attach_kl_sequences(inputs.train, block, c.data.max_length);
  data::attach_kl_sequences(inputs.validation, block, c.data.max_length);
}

// The final checkpoint, the outputs, the last evaluation; every observer hears of the end.
void finish_training(Run& run, StepStats last) {
  log_gpu_memory(run, &last);
  if (const auto report = run.weight_sync->end_report(); !report.empty() && run.comm.rank() == 0)
    log::info() << report;
  write_checkpoint(run);
  save_outputs(run);
  if (!run.validation.empty()) {
    last.eval_loss = run_validation(run);
    for (auto& o : run.observers) o->on_eval(run.state.step, *last.eval_loss);
  }
  for (auto& o : run.observers) o->on_finish(last);
  run.comm.wait_for_peers("end of training (rank 0's last metrics and plots)");
  if (run.comm.rank() == 0) mark_outputs_complete(run);
}

}  // namespace

int run_training(const TrainConfig& configured) {
  TrainConfig c = configured;  // with training.microBatchSize resolved, and lowered after an OOM
  install_stop_handlers();
  const auto env = parallel::DistEnv::from_environment();
  const auto device = pick_device(env.local_rank);
  if (device.is_cuda()) torch::cuda::synchronize(device.index());  // fail early on a bad device
  const auto dtype = compute_dtype(c.model.dtype, device);
  auto comm = parallel::Communicator::create(env, api::to_string(c.distributed.backend), device,
                                             c.distributed.timeout_seconds);
  const bool lead = env.rank == 0;
  begin_outputs(c, lead);

  apply_test_memory_cap(device, env.rank);  // a smaller GPU for tests, loading included
  // A sharded scheme splits each part as it loads.
  parallel::WeightLoading loading(c, *comm, autocast_dtype(device, dtype));
  auto inputs = load_user_inputs(c, device, dtype, env.local_world_size,
                                 [&loading](const std::string& prefix, torch::nn::Module& part) {
                                   loading.part_loaded(prefix, part);
                                 });
  auto model = inputs.model;
  auto trainable = trainable_parameters(*model);
  auto checkpoint = agree_on_resume_point(*comm, c, device, [&](const CheckpointContents& k) {
    check_resumable(k, c, trainable, env.world_size, inputs.train.size());
  });
  const int64_t resumed_global_batch = checkpoint ? checkpoint->state.global_batch : 0;
  const MicroBatchChoice micro_batch =
      agree_on_micro_batch(*comm, c, model->config(), device, resumed_global_batch);
  const auto shape = batch_shape(c, env.world_size, resumed_global_batch);
  data::DistributedSampler sampler(inputs.train.size(), shape.global_batch, shape.accumulation,
                                   env.rank, env.world_size, c.training.seed, c.data.shuffle);
  const int64_t total_steps = train::total_steps(c, sampler.steps_per_epoch());
  optim::LrSchedule schedule{
      c.training.lr_scheduler, c.training.learning_rate,
      c.training.warmup_steps > 0
          ? c.training.warmup_steps
          : static_cast<long>(std::ceil(c.training.warmup_ratio * total_steps)),
      total_steps};

  model->set_recompute_layers(recomputes_layers(c));
  model->set_recompute_offload(c.model.offload_checkpoints && device.is_cuda());
  // How the weights stay in step across processes, and the optimizer over what it hands out.
  auto weight_sync = parallel::make_weight_sync(c, *comm, model, trainable, loading);
  const auto preference = preference_objective(c);
  if (preference && preference->unpaired()) attach_kl_sequences(c, shape.global_batch, inputs);
  // The reference of dpo, ipo and kto: the weights as loaded, before a checkpoint replaces them.
  torch::Tensor train_reference, validation_reference;
  if (preference && preference->uses_reference()) {
    const PairScoring scoring = pair_scoring(*model, device, dtype, *comm, c, inputs.text.pad_id);
    const auto reference_start = Clock::now();
    weight_sync->wait_for_weights();
    auto reference =
        reference_log_probs(scoring, c, inputs.train, inputs.validation, shape.global_batch);
    train_reference = reference.train;
    validation_reference = reference.validation;
    weight_sync->after_evaluation();
    if (lead)
      log::info() << "reference log-probabilities of "
                  << inputs.train.size() + inputs.validation.size()
                  << (preference->unpaired() ? " examples" : " pairs")
                  << " under the starting weights (training.objective "
                  << api::to_string(c.training.objective)
                  << ") reference_seconds=" << log::fixed(seconds_since(reference_start), 2);
  }
  if (checkpoint) {
    weight_sync->restore_weights(
        trainable, [&](const std::string& name) { return checkpoint->trainable.read(name); });
  }
  // Every rank starts from rank 0's weights, whatever happened before (as torch DDP does).
  auto whole = weight_sync->held_whole(trainable);
  comm->broadcast(whole, 0, "initial weights");
  optim::AdamW optimizer(weight_sync->optimizer_entries(optim::decays_weight),
                         {c.training.adam_beta1, c.training.adam_beta2, c.training.adam_epsilon,
                          c.training.weight_decay});

  Run run{c,
          *comm,
          device,
          dtype,
          model,
          trainable,
          std::move(weight_sync),
          std::move(optimizer),
          schedule,
          std::move(sampler),
          std::move(inputs.train),
          std::move(inputs.validation),
          std::move(inputs.text),
          start_state(c, shape, env.world_size, checkpoint),
          make_observers(c, env, device),
          std::make_shared<std::function<void()>>()};
  run.preference = preference;
  run.train_reference = train_reference;
  run.validation_reference = validation_reference;
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
  // Held-out pairs before the first step, to compare with the end's.
  if (run.preference && !run.validation.empty() && run.state.step == 0) run_validation(run);
  const StepStats last = train_steps(run, total_steps);
  if (run.state.step < total_steps) return stop_early(run, total_steps);
  finish_training(run, last);
  return 0;
}

}  // namespace kubetune::train
