// One optimizer step, top to bottom (queue_step):
//   1. the rank's micro-batches for this step; their counts (target tokens; pairs or examples,
//      for a preference objective) are all-reduced once, so the loss of every micro-batch on every
//      rank is divided by the same global count; kto's KL estimate over the whole global batch
//   2. forward + backward per micro-batch; only the last one synchronises gradients, inside its
//      backward (weight_sync.h says how: the step does not know which scheme it has)
//   3. the loss and the out-of-memory vote, summed over ranks in one small all-reduce
//   4. clip, AdamW, learning-rate schedule (no update where some rank ran out of memory)
//   5. the results queued for the host, read back by finish_step while the next step runs
// A rank that runs out of GPU memory in a micro-batch drops what the step computed and still
// takes part in its collectives with zero gradients; every rank then re-runs the step at a smaller
// micro-batch (recover_from_out_of_memory).
#include "trainer/loop/step.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <sstream>

#include "common/log.h"
#include "trainer/data/batch.h"
#include "trainer/device/out_of_memory.h"
#include "trainer/inputs/user_input_error.h"
#include "trainer/loop/preference.h"
#include "trainer/loop/stop_signal.h"
#include "trainer/model/device_copy.h"
#include "trainer/model/loss.h"
#include "trainer/optim/grad_clip.h"
#include "trainer/parallel/embedding_gradient_sync.h"
#include "trainer/plan/micro_batch.h"

namespace kubetune::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// c10's errors append a backtrace after the first line.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

data::MicroBatch collate(const Run& run, const std::vector<size_t>& indices) {
  std::vector<const data::Example*> picked;
  for (size_t i : indices) picked.push_back(&run.train[i]);
  if (picked.empty()) return {};
  const int32_t pad_id = run.text.pad_id;
  // Preference data is never packed (TRL pads it too): each answer is scored whole. kto's KL
  // sequences are scored apart, before the step (kto_step_kl).
  if (run.preference && run.preference->unpaired()) return data::pad_batch(picked, pad_id);
  if (run.preference) return data::pair_batch(picked, pad_id);
  return run.config.data.packing ? data::pack_batch(picked, run.config.data.max_length, pad_id)
                                 : data::pad_batch(picked, pad_id);
}

// With gradient checkpointing, memory comes first: the loss's chunk of logits is then the largest
// allocation of the step after the weights (1 GiB for 4096 rows of Llama 3's vocabulary), so it
// is kept to a quarter of that (a few percent slower).
int64_t loss_chunk_rows(const Run& run) {
  const int64_t budget = recomputes_layers(run.config) ? (256LL << 20) : (1LL << 30);
  return model::loss_chunk_rows(run.model->config().vocab_size, budget);
}

// Gradients are dropped, not zeroed (torch's set_to_none): the next backward then hands its
// gradient tensors over instead of adding them to zeros. All of them, also those of tensors this
// rank's sharded optimizer does not update: their gradients still feed the next reduction.
void drop_gradients(Run& run) {
  for (auto& t : run.trainable.tensors) t.mutable_grad() = torch::Tensor();
  run.weight_sync->drop_gradients();
}

// The gradients AdamW reads, clipped to the global norm. Split between ranks, slices are counted
// by their owners and whole tensors (the same on every rank) by rank 0 alone.
torch::Tensor clip_gradients(Run& run) {
  const bool split = run.weight_sync->splits_optimizer();
  std::vector<torch::Tensor> gradients, counted;
  for (const auto& p : run.optimizer.params()) {
    if (!p.param.grad().defined()) continue;
    gradients.push_back(p.values(p.param.grad()));
    if (!split || !p.whole() || run.comm.rank() == 0) counted.push_back(gradients.back());
  }
  std::function<void(torch::Tensor&)> sum;
  if (split) sum = [&](torch::Tensor& t) { run.comm.all_reduce_sum(t, "gradient norm"); };
  return optim::clip_grad_norm(gradients, counted, run.config.training.max_grad_norm, sum);
}

// This step's micro-batches and the global counts that normalise its loss.
struct StepBatch {
  std::vector<std::vector<size_t>> indices;  // each micro-batch's examples
  std::vector<data::MicroBatch> micro;
  // A preference objective with a reference: each micro-batch's reference log-probabilities, in
  // its rows' order (host).
  std::vector<torch::Tensor> reference;
  // kto: each micro-batch's labels (bool, host), and the step's KL estimate (on the device).
  std::vector<torch::Tensor> desirable;
  torch::Tensor kl;
  // On the device, summed over ranks (StepCount).
  torch::Tensor counts;
};
// kPairs: a preference objective's pairs (kto: examples). kChosenTokens: the chosen sequences'
// predicted tokens, prompt included (orpo's NLL; else 0).
enum StepCount : int64_t { kTargets, kTokens, kStopVotes, kPairs, kChosenTokens };

// What the step's per-micro-batch sums are divided by, global and on the device: a single
// process with the whole global batch would compute the same loss.
struct LossScales {
  torch::Tensor per_target;        // SFT: 1 / target tokens
  torch::Tensor per_pair;          // preference: 1 / pairs (TRL's mean over pairs or examples)
  torch::Tensor per_chosen_token;  // orpo's NLL: 1 / the chosen sequences' tokens
};

LossScales loss_scales(const torch::Tensor& counts) {
  auto inverse = [&](StepCount c) {
    return (1.0 / counts[c].clamp_min(1).to(torch::kFloat64)).to(torch::kFloat32);
  };
  return {inverse(kTargets), inverse(kPairs), inverse(kChosenTokens)};
}

// The sums a step's micro-batches add up on the device (StepResults reads them after the
// all-reduce): the next-token loss (SFT; orpo's NLL), the pairs' losses, then PreferenceStat.
enum StepSum : int64_t { kLossSum, kPairLossSum, kPreferenceSums };
constexpr int64_t kStepSums = kPreferenceSums + model::kPreferenceStats;

StepBatch step_batch(Run& run, int64_t epoch, int64_t step_in_epoch, StepStats& s) {
  StepBatch b;
  int64_t local_targets = 0, local_pairs = 0, chosen_tokens = 0;
  b.indices = run.sampler.micro_batches(epoch, step_in_epoch);
  for (const auto& indices : b.indices) {
    b.micro.push_back(collate(run, indices));
    local_targets += b.micro.back().n_targets;
    s.local_tokens += b.micro.back().n_tokens;
    s.local_samples += static_cast<int64_t>(indices.size());
    if (!run.preference) continue;
    local_pairs += static_cast<int64_t>(indices.size());
    if (run.preference->adds_chosen_nll())
      for (size_t i : indices) chosen_tokens += chosen_sequence_tokens(run.train[i]);
    torch::Tensor reference;
    if (run.train_reference.defined() && !indices.empty())
      reference = reference_rows(run.train_reference, indices);
    if (run.preference->unpaired() && reference.defined()) {  // the completions' half
      reference = reference.narrow(0, 0, static_cast<int64_t>(indices.size()));
      std::vector<uint8_t> desirable;
      for (size_t i : indices) desirable.push_back(run.train[i].desirable ? 1 : 0);
      b.desirable.push_back(torch::tensor(desirable).to(torch::kBool));
    } else {
      b.desirable.emplace_back();
    }
    b.reference.push_back(reference);
  }
  // The third count is how many ranks were asked to stop (stop_signal.h): every rank learns it
  // with this step's results, so all of them stop after the same step.
  const int64_t stop_vote = stop_requested() ? 1 : 0;
  b.counts = model::to_device_async(
      torch::tensor({local_targets, s.local_tokens, stop_vote, local_pairs, chosen_tokens},
                    torch::kInt64),
      run.device);
  run.comm.all_reduce_sum(b.counts, "target-token count");
  return b;
}

// A preference objective's loss on micro-batch `m`: its per-pair (kto: per-example) losses /
// global pairs (+ orpo's NLL / the global batch's chosen tokens), from each sequence's
// log-probabilities.
torch::Tensor pair_loss(Run& run, const StepBatch& b, size_t m, const torch::Tensor& hidden,
                        const torch::Tensor& labels, const LossScales& scale, torch::Tensor& sums) {
  const data::MicroBatch& micro = b.micro[m];
  auto [log_probs, targets] =
      model::sequence_log_probs(*run.model, hidden, labels, loss_chunk_rows(run));
  const auto on_device = [&](const torch::Tensor& t) {
    return t.defined() ? model::to_device_async(t, run.device) : t;
  };
  const auto terms = run.preference->unpaired()
                         ? model::kto_terms(*run.preference, log_probs, on_device(b.reference[m]),
                                            on_device(b.desirable[m]), b.kl)
                         : model::preference_terms(*run.preference, log_probs, on_device(targets),
                                                   on_device(b.reference[m]));
  sums[kPairLossSum].add_(terms.pair_loss_sum.detach().to(torch::kFloat64));
  sums.narrow(0, kPreferenceSums, model::kPreferenceStats).add_(terms.stats);
  torch::Tensor loss = terms.pair_loss_sum * scale.per_pair;
  if (run.preference->adds_chosen_nll()) {
    const auto nll = chosen_sequence_nll(*run.model, hidden, micro, loss_chunk_rows(run));
    sums[kLossSum].add_(nll.detach().to(torch::kFloat64));
    loss = loss + nll * scale.per_chosen_token;
  }
  return loss;
}

// kto: the step's KL estimate, from every rank's KL sequences under the weights as they are (a
// forward without gradients, as an evaluation's), before the step's first forward.
torch::Tensor kl_estimate(Run& run, const StepBatch& b) {
  run.weight_sync->wait_for_weights();
  const PairScoring scoring =
      pair_scoring(*run.model, run.device, run.dtype, run.comm, run.config, run.text.pad_id);
  torch::Tensor kl = kto_step_kl(scoring, run.train, b.indices, run.train_reference);
  run.weight_sync->after_evaluation();
  return kl;
}

// One micro-batch's forward; its loss scaled by 1/global_targets (gradients are summed over
// ranks, so the result is the sum over all targets / global_targets). A micro-batch with no
// examples, or after this rank ran out of memory, contributes zero gradients. A mixture of
// experts whose config asks for the router's load-balancing loss adds it with weight
// 1 / (micro-batches x ranks): the step's is then the mean over its micro-batches, what one
// forward over them all would give transformers. (The reported sums hold the
// next-token or pair losses alone.) Preference objectives: pair_loss.
torch::Tensor micro_batch_loss(Run& run, const StepBatch& b, size_t m, const LossScales& scale,
                               torch::Tensor& sums, double router_weight) {
  // Autocast for the forward only: backward runs outside it (autograd's threads inherit it).
  AutocastScope autocast(run.device, run.dtype);
  const data::MicroBatch& micro = b.micro[m];
  if (micro.batch == 0 || run.out_of_memory_pending)
    return run.weight_sync->empty_batch_loss(run.text.pad_id);
  inject_test_out_of_memory(micro.batch, run.comm.rank());
  auto t = to_tensors(micro, run.device);
  auto hidden = run.model->hidden_states(t.input_ids, t.position_ids, t.segment_ids);
  torch::Tensor loss;
  if (run.preference) {
    loss = pair_loss(run, b, m, hidden, t.labels, scale, sums);
  } else {
    auto [sum, n] = model::next_token_loss_sum(*run.model, hidden, t.labels, loss_chunk_rows(run));
    sums[kLossSum].add_(sum.detach().to(torch::kFloat64));
    loss = sum * scale.per_target;
  }
  const torch::Tensor router = run.model->router_loss(router_weight);
  return router.defined() ? loss + router : loss;
}

// This rank ran out of GPU memory in micro-batch `m`: it drops what the step computed and votes
// to skip the update; it still takes part in the step's collectives, with zero gradients. Where
// the weight sync cannot let it rejoin, the run stops here and names what to change.
void drop_step_after_out_of_memory(Run& run, const c10::OutOfMemoryError& e, size_t m,
                                   const StepBatch& b, torch::Tensor& sums) {
  if (const auto why = run.weight_sync->why_out_of_memory_is_final(); !why.empty())
    throw UserInputError(
        "rank " + std::to_string(run.comm.rank()) + " ran out of GPU memory in step " +
        std::to_string(run.state.step + 1) + " (micro-batch " +
        std::to_string(micro_batch_size(run.config)) + ") with " + why +
        ", so the step cannot be re-run in place: set a smaller training.microBatchSize, "
        "model.gradientCheckpointing, or more processes (" +
        first_line(e.what()) + ")");
  log::warn() << "rank " << run.comm.rank() << " ran out of GPU memory in step "
              << run.state.step + 1 << " (micro-batch " << m + 1 << " of " << b.micro.size() << ", "
              << b.micro[m].batch << " examples): " << first_line(e.what());
  run.out_of_memory_pending = true;
  sums.zero_();
  drop_gradients(run);
  release_cached_memory(run.device);
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

// The last micro-batch's backward, which synchronises gradients across ranks. The timeline's
// kLastGradient moves with every gradient that arrives: its last position is when this rank's
// own backward ended and waiting for the others began.
void synced_backward(Run& run, torch::Tensor& loss, size_t m, const StepBatch& b,
                     torch::Tensor& sums, DeviceTimeline& timeline) {
  parallel::Communicator::Watch watch(run.comm, "gradient all-reduce (backward)");
  timeline.record(kLastGradient);
  *run.on_gradient = [&] { timeline.record(kLastGradient); };
  try {
    loss.backward();
    run.weight_sync->after_backward();
  } catch (const c10::OutOfMemoryError& e) {
    *run.on_gradient = nullptr;
    if (run.comm.world_size() > 1) throw out_of_memory_in_synced_backward(run, e);
    drop_step_after_out_of_memory(run, e, m, b, sums);  // alone, nothing was reduced yet
  } catch (const std::exception& e) {
    *run.on_gradient = nullptr;
    if (run.comm.world_size() > 1 && parallel::is_collective_failure(e))
      throw parallel::collective_failure(run.comm.rank(), "gradient all-reduce (backward)", e);
    throw;
  }
  *run.on_gradient = nullptr;
}

// Forward and backward over the step's micro-batches; returns this rank's sums (StepSum, fp64, on
// the device). Only the last backward synchronises gradients.
torch::Tensor forward_backward(Run& run, const StepBatch& b, const LossScales& scale,
                               DeviceTimeline& timeline) {
  auto sums =
      torch::zeros({kStepSums}, torch::TensorOptions().dtype(torch::kFloat64).device(run.device));
  TORCH_CHECK(!b.micro.empty(), "a step without micro-batches");
  const size_t last = b.micro.size() - 1;
  const double router_weight = 1.0 / (static_cast<double>(b.micro.size()) * run.comm.world_size());
  for (size_t m = 0; m < last; ++m) {
    if (run.out_of_memory_pending) continue;  // the step is dropped: only its collectives remain
    try {
      micro_batch_loss(run, b, m, scale, sums, router_weight).backward();
      run.weight_sync->after_backward();
    } catch (const c10::OutOfMemoryError& e) {
      drop_step_after_out_of_memory(run, e, m, b, sums);
    }
  }
  run.comm.begin_synced_micro_step();
  torch::Tensor loss;
  try {
    loss = micro_batch_loss(run, b, last, scale, sums, router_weight);
  } catch (const c10::OutOfMemoryError& e) {
    drop_step_after_out_of_memory(run, e, last, b, sums);
    loss = micro_batch_loss(run, b, last, scale, sums, router_weight);  // now the empty batch's
  }
  synced_backward(run, loss, last, b, sums, timeline);
  return sums;
}

// TRL's metrics: means over the global batch's chosen and rejected answers (kto: desirable and
// undesirable examples; a kind the batch lacks has none); the loss is the mean pair loss (plus
// orpo's NLL per chosen token).
PreferenceStats preference_stats(const model::PreferenceObjective& o, const StepResults<double>& r,
                                 double& loss) {
  loss = r.pair_loss_sum / r.global_pairs + r.loss_sum / std::max(1.0, r.chosen_tokens);
  const double chosen = r.preference[model::kChosenCount];
  const double rejected = r.preference[model::kRejectedCount];
  const auto mean = [&](model::PreferenceStat k, double count) -> std::optional<double> {
    if (count <= 0) return std::nullopt;
    return r.preference[k] / count;
  };
  PreferenceStats p;
  p.rewards_chosen = mean(model::kChosenReward, chosen);
  p.rewards_rejected = mean(model::kRejectedReward, rejected);
  if (p.rewards_chosen && p.rewards_rejected)
    p.rewards_margins = *p.rewards_chosen - *p.rewards_rejected;
  p.logps_chosen = mean(model::kChosenLogProb, chosen);
  p.logps_rejected = mean(model::kRejectedLogProb, rejected);
  if (o.unpaired())
    p.kl = r.kl;
  else
    p.rewards_accuracies = mean(model::kCorrectPairs, r.global_pairs);
  return p;
}

}  // namespace

PendingStep queue_step(Run& run) {
  PendingStep p{{}, {}, DeviceTimeline(run.device), {}};
  StepStats& s = p.stats;
  const auto step_start = Clock::now();
  const int64_t steps_per_epoch = run.sampler.steps_per_epoch();
  const int64_t epoch = run.state.step / steps_per_epoch;
  const int64_t step_in_epoch = run.state.step % steps_per_epoch;

  // 1. Data and the global normaliser, which stays on the device; kto's KL estimate.
  StepBatch batch = step_batch(run, epoch, step_in_epoch, s);
  if (run.preference && run.preference->unpaired()) batch.kl = kl_estimate(run, batch);
  run.weight_sync->begin_step([&] {
    return parallel::token_ids_in(run.train, run.sampler.global_batch_indices(epoch, step_in_epoch),
                                  run.text.pad_id);
  });
  s.data_seconds = seconds_since(step_start);
  p.timeline.mark();  // kStart
  p.timeline.add();   // kLastGradient: recorded before the last backward, then by the hook

  // 2. Forward and backward.
  const LossScales scale = loss_scales(batch.counts);
  torch::manual_seed(run.config.training.seed + 1000003ULL * run.state.step +
                     run.comm.rank());  // dropout
  const torch::Tensor sums = forward_backward(run, batch, scale, p.timeline);
  run.weight_sync->finish_gradients();

  // 3. The loss and whether any rank ran out of memory, summed in the step's one small
  // all-reduce. The vote stays on the device: the optimizer reads it there (a skipped update),
  // the host with the step's results, so no rank waits for it here.
  auto sums_and_vote =
      torch::cat({sums, torch::full({1}, run.out_of_memory_pending ? 1.0 : 0.0, sums.options())});
  run.comm.all_reduce_sum(sums_and_vote, "loss and out-of-memory vote");
  const torch::Tensor vote = sums_and_vote[kStepSums];
  const torch::Tensor skip_vote = vote.clamp_max(1).to(torch::kFloat32);
  p.timeline.mark();  // kGradientsSynced

  // 4. Update (none where some rank ran out of memory).
  const torch::Tensor grad_norm = clip_gradients(run);
  s.learning_rate = run.schedule.at(run.state.step);
  run.optimizer.step(s.learning_rate, skip_vote);
  run.weight_sync->after_update();
  drop_gradients(run);
  p.timeline.mark();  // kWeightsUpdated

  // 5. The results, copied to the host without waiting.
  StepResults<torch::Tensor> results{
      sums_and_vote[kLossSum],
      batch.counts[kTargets],
      batch.counts[kTokens],
      grad_norm,
      batch.counts[kStopVotes],
      vote,
      batch.counts[kPairs],
      batch.counts[kChosenTokens],
      sums_and_vote[kPairLossSum],
      batch.kl.defined() ? batch.kl : torch::zeros({}, sums.options()),
      {}};
  for (int64_t k = 0; k < model::kPreferenceStats; ++k)
    results.preference[k] = sums_and_vote[kPreferenceSums + k];
  std::vector<torch::Tensor> values;
  results.each([&](torch::Tensor& v) { values.push_back(v.to(sums.device(), torch::kFloat64)); });
  p.results = model::to_host_async(torch::stack(values));
  if (const torch::Tensor routed = run.model->take_expert_tokens(); routed.defined())
    p.expert_tokens = model::to_host_async(routed.to(torch::kFloat64));
  p.timeline.mark();  // kResultsCopied

  run.state.step += 1;
  s.step = run.state.step;
  s.total_steps = run.schedule.total_steps;
  s.epoch = static_cast<double>(run.state.step) / steps_per_epoch;
  return p;
}

StepStats finish_step(Run& run, PendingStep& p) {
  p.timeline.wait();
  StepResults<double> r{};
  const double* value = p.results.data_ptr<double>();
  r.each([&](double& v) { v = *value++; });
  StepStats s = p.stats;
  s.global_targets = static_cast<int64_t>(r.global_targets);
  s.global_tokens = static_cast<int64_t>(r.global_tokens);
  s.loss = r.loss_sum / std::max<int64_t>(1, s.global_targets);
  if (r.global_pairs > 0) s.preference = preference_stats(*run.preference, r, s.loss);
  s.grad_norm = r.grad_norm;
  s.stop_requested = r.stop_votes > 0;
  s.out_of_memory = r.out_of_memory_votes > 0;
  s.forward_backward_seconds = p.timeline.seconds_between(kStart, kLastGradient);
  s.allreduce_wait_seconds = p.timeline.seconds_between(kLastGradient, kGradientsSynced);
  s.optimizer_seconds = p.timeline.seconds_between(kGradientsSynced, kWeightsUpdated);
  if (s.out_of_memory) return s;  // nothing of it counts: it is run again
  if (p.expert_tokens.defined()) {
    const double* routed = p.expert_tokens.data_ptr<double>();
    s.expert_tokens.assign(routed, routed + p.expert_tokens.numel());
  }
  run.state.tokens_seen += s.global_tokens;
  run.state.samples_seen += s.local_samples;  // this rank's; the global count is step x batch
  s.has_device_memory = device_memory(run.device, s.device_memory);
  return s;
}

// The step runs again with half the micro-batch (or the next divisor below) and more
// accumulation.
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

}  // namespace kubetune::train
