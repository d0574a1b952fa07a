#include "trainer/loop/preference.h"

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <functional>

#include "common/log.h"
#include "trainer/data/batch.h"
#include "trainer/device/device.h"
#include "trainer/inputs/run_inputs.h"
#include "trainer/io/file_digest.h"
#include "trainer/io/safetensors.h"
#include "trainer/loop/evaluate.h"
#include "trainer/model/loss.h"

namespace kubetune::train {
namespace {

using Score = std::function<void(const std::vector<size_t>&, const data::MicroBatch&,
                                 const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
// How a batch of examples is laid out in rows.
using Layout = std::function<data::MicroBatch(const std::vector<const data::Example*>&, int32_t)>;

// Pairs as TRL's collator lays them out (kto: its completions, then its KL sequences).
data::MicroBatch both_sequences(const std::vector<const data::Example*>& examples, int32_t pad) {
  return data::pair_batch(examples, pad);
}
// kto's completions alone, one row each.
data::MicroBatch first_sequences(const std::vector<const data::Example*>& examples, int32_t pad) {
  return data::pad_batch(examples, pad);
}
// kto's KL sequences alone, one row each.
data::MicroBatch kl_sequences(const std::vector<const data::Example*>& examples, int32_t pad) {
  std::vector<const data::Example*> kl;
  for (const data::Example* e : examples) kl.push_back(e->rejected.get());
  return data::pad_batch(kl, pad);
}

// Runs `score(indices, batch, hidden, log_probs, targets)` over `batches` of example indices,
// this rank's (every rank passes as many), each laid out by `layout`, without gradients. With
// fully sharded weights each forward gathers from the peers, so an empty batch still runs one, on
// one padding token.
void score_batches(const PairScoring& s, const std::vector<data::Example>& examples,
                   const std::vector<std::vector<size_t>>& batches, const Layout& layout,
                   const Score& score) {
  torch::NoGradGuard no_grad;
  const bool was_training = s.model.is_training();
  s.model.eval();
  for (const auto& indices : batches) {
    AutocastScope autocast(s.device, s.dtype);
    if (indices.empty()) {
      pad_forward(s.model, s.pad_id, s.device);
      continue;
    }
    std::vector<const data::Example*> picked;
    for (size_t i : indices) picked.push_back(&examples[i]);
    const data::MicroBatch batch = layout(picked, s.pad_id);
    const auto t = to_tensors(batch, s.device);
    const auto hidden = s.model.hidden_states(t.input_ids, t.position_ids, t.segment_ids);
    auto [log_probs, targets] = model::sequence_log_probs(s.model, hidden, t.labels, s.chunk_rows);
    score(indices, batch, hidden, log_probs, targets);
  }
  if (was_training) s.model.train();
}

// This rank's share of `n` examples, `micro_batch` at a time (evaluate.h: forward_batches).
std::vector<std::vector<size_t>> rank_batches(const PairScoring& s, size_t n) {
  return forward_batches(n, s.comm.rank(), s.comm.world_size(), s.micro_batch);
}

void for_each_pair_batch(const PairScoring& s, const std::vector<data::Example>& pairs,
                         const Score& score) {
  score_batches(s, pairs, rank_batches(s, pairs.size()), both_sequences, score);
}

// kto's KL sums over `batches`: [sum of policy minus reference log-probabilities, sequences], this
// rank's, on the device.
torch::Tensor kl_sums(const PairScoring& s, const std::vector<data::Example>& examples,
                      const std::vector<std::vector<size_t>>& batches,
                      const torch::Tensor& reference) {
  auto sums = torch::zeros({2}, torch::TensorOptions().dtype(torch::kFloat64).device(s.device));
  score_batches(s, examples, batches, kl_sequences,
                [&](const std::vector<size_t>& indices, const data::MicroBatch&,
                    const torch::Tensor&, const torch::Tensor& lp, const torch::Tensor&) {
                  const auto ref = reference.index_select(
                      0, torch::tensor(std::vector<int64_t>(indices.begin(), indices.end())));
                  sums[0] += (lp.to(torch::kFloat64) - ref.select(1, 1).to(s.device)).sum();
                  sums[1] += static_cast<double>(indices.size());
                });
  return sums;
}

// A pass over many pairs (the reference of 100k pairs takes minutes on an 8B model) says how far it
// is every 30 s: rank 0's share, which is every rank's.
class PassProgress {
 public:
  PassProgress(bool lead, size_t share) : lead_(lead), share_(share) {}
  void add(size_t pairs) {
    done_ += pairs;
    const auto now = Clock::now();
    if (!lead_ || now - last_ < std::chrono::seconds(30) || done_ >= share_) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double eta = seconds / static_cast<double>(done_) * static_cast<double>(share_ - done_);
    log::info() << "reference log-probabilities: " << done_ << "/" << share_
                << " pairs of this rank, " << log::fixed(static_cast<double>(done_) / seconds, 1)
                << " pairs/s, eta " << log::fixed(eta, 0) << " s";
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool lead_;
  size_t share_, done_ = 0;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

}  // namespace

PairScoring pair_scoring(model::CausalLMImpl& model, torch::Device device, torch::Dtype dtype,
                         parallel::Communicator& comm, const TrainConfig& c, int32_t pad_id) {
  // Without gradients the logits chunk is the largest allocation: a quarter of a GiB of it.
  return {model,
          device,
          dtype,
          comm,
          micro_batch_size(c),
          pad_id,
          model::loss_chunk_rows(model.config().vocab_size, 256LL << 20)};
}

torch::Tensor pair_log_probs(const PairScoring& s, const std::vector<data::Example>& pairs) {
  const auto n = static_cast<int64_t>(pairs.size());
  auto all = torch::zeros({n, 2}, torch::kFloat64);
  if (n == 0) return all;  // no validation file: the same on every rank
  PassProgress progress(s.comm.rank() == 0, (pairs.size() + s.comm.world_size() - 1) /
                                                static_cast<size_t>(s.comm.world_size()));
  for_each_pair_batch(s, pairs,
                      [&](const std::vector<size_t>& indices, const data::MicroBatch&,
                          const torch::Tensor&, const torch::Tensor& lp, const torch::Tensor&) {
                        // lp is every chosen row, then every rejected one: [2, N] -> [N, 2].
                        const auto rows = lp.to(torch::kCPU, torch::kFloat64).view({2, -1}).t();
                        const std::vector<int64_t> at(indices.begin(), indices.end());
                        all.index_copy_(0, torch::tensor(at, torch::kInt64), rows);
                        progress.add(indices.size());
                      });
  // Each pair was scored on one rank, zeros elsewhere: the sum is every pair's values.
  auto on_device = all.to(s.device);
  s.comm.all_reduce_sum(on_device, "reference log-probabilities");
  return on_device.cpu();
}

namespace {

// What a run's reference log-probabilities depend on, as one string: a file with another is stale.
std::string reference_key(const TrainConfig& c, int64_t global_batch) {
  nlohmann::json key = {
      {"train", io::file_xxh3(c.data.train)},  {"model", c.model.path},
      {"maxLength", c.data.max_length},        {"method", c.method.type},
      {"quantization", c.method.quantization}, {"dtype", c.model.dtype},
      {"precision", c.model.precision},        {"objective", c.training.objective}};
  if (c.data.validation) key["validation"] = io::file_xxh3(*c.data.validation);
  // kto's KL sequences pair each prompt with a completion of its block of the global batch.
  if (c.training.objective == api::TrainingObjective::kKto) key["klBlock"] = global_batch;
  return key.dump();
}

std::string reference_path(const TrainConfig& c) {
  return checkpoint_dir(c) + "/reference_logps.safetensors";
}

// Rank 0's copy of the file, when it is there and made for this run.
std::optional<ReferenceLogProbs> read_reference(const TrainConfig& c, const std::string& key,
                                                size_t train, size_t validation) {
  const std::string path = reference_path(c);
  if (!std::filesystem::exists(path)) return std::nullopt;
  try {
    const io::SafetensorsFile file(path);
    if (file.metadata().value("key", "") != key) return std::nullopt;
    ReferenceLogProbs r{file.tensor("train").clone(), file.tensor("validation").clone()};
    if (r.train.size(0) != static_cast<int64_t>(train) ||
        r.validation.size(0) != static_cast<int64_t>(validation))
      return std::nullopt;
    return r;
  } catch (const std::exception& e) {  // damaged: computed again and rewritten
    log::warn() << path << ": " << e.what() << "; computing the reference again";
    return std::nullopt;
  }
}

}  // namespace

ReferenceLogProbs reference_log_probs(const PairScoring& s, const TrainConfig& c,
                                      const std::vector<data::Example>& train,
                                      const std::vector<data::Example>& validation,
                                      int64_t global_batch) {
  const bool lead = s.comm.rank() == 0;
  const std::string key = lead ? reference_key(c, global_batch) : "";
  std::optional<ReferenceLogProbs> kept;
  if (lead) kept = read_reference(c, key, train.size(), validation.size());
  std::vector<torch::Tensor> found = {
      torch::full({1}, kept ? 1.0 : 0.0, torch::kFloat64).to(s.device)};
  s.comm.broadcast(found, 0, "whether the reference log-probabilities are kept");
  if (found[0].item<double>() > 0) {
    const auto options = torch::TensorOptions().dtype(torch::kFloat64).device(s.device);
    auto values_of = [&](const torch::Tensor* kept_values, size_t pairs) {
      return kept_values ? kept_values->to(s.device)
                         : torch::zeros({static_cast<int64_t>(pairs), 2}, options);
    };
    std::vector<torch::Tensor> values = {values_of(lead ? &kept->train : nullptr, train.size())};
    if (!validation.empty())  // (no empty tensor goes through a collective)
      values.push_back(values_of(lead ? &kept->validation : nullptr, validation.size()));
    s.comm.broadcast(values, 0, "the kept reference log-probabilities");
    if (lead) log::info() << "reference log-probabilities read from " << reference_path(c);
    return {values[0].cpu(),
            validation.empty() ? torch::zeros({0, 2}, torch::kFloat64) : values[1].cpu()};
  }
  ReferenceLogProbs r{pair_log_probs(s, train), pair_log_probs(s, validation)};
  if (lead) {
    std::filesystem::create_directories(checkpoint_dir(c));
    io::save_safetensors(reference_path(c), {{"train", r.train}, {"validation", r.validation}},
                         {{"key", key}});
  }
  return r;
}

torch::Tensor kto_step_kl(const PairScoring& s, const std::vector<data::Example>& examples,
                          const std::vector<std::vector<size_t>>& micro,
                          const torch::Tensor& reference) {
  auto sums = kl_sums(s, examples, micro, reference);
  s.comm.all_reduce_sum(sums, "kto's KL estimate");
  return model::kto_kl(sums);
}

namespace {

// kto on held-out examples: one KL estimate over all of them, then each completion's loss.
PairEvaluation evaluate_unpaired(const PairScoring& s, const model::PreferenceObjective& objective,
                                 const std::vector<data::Example>& examples,
                                 const torch::Tensor& reference) {
  const auto batches = rank_batches(s, examples.size());
  auto kl_total = kl_sums(s, examples, batches, reference);
  s.comm.all_reduce_sum(kl_total, "held-out KL estimate");
  const torch::Tensor kl = model::kto_kl(kl_total);
  // Sums: losses, then the completions' NLL and target tokens, desirable ones and undesirable
  // ones, then the PreferenceStat values.
  constexpr int64_t kStats = 5;
  auto sums = torch::zeros({kStats + model::kPreferenceStats}, torch::kFloat64);
  score_batches(s, examples, batches, first_sequences,
                [&](const std::vector<size_t>& indices, const data::MicroBatch&,
                    const torch::Tensor&, const torch::Tensor& lp, const torch::Tensor& targets) {
                  std::vector<int64_t> at(indices.begin(), indices.end());
                  std::vector<uint8_t> good;
                  for (size_t i : indices) good.push_back(examples[i].desirable ? 1 : 0);
                  const auto desirable = torch::tensor(good).to(torch::kBool);
                  const auto ref = reference.index_select(0, torch::tensor(at)).select(1, 0);
                  const auto terms =
                      model::kto_terms(objective, lp, ref.to(s.device), desirable.to(s.device), kl);
                  sums[0] += terms.pair_loss_sum.item<double>();
                  const auto nll = -lp.to(torch::kCPU, torch::kFloat64);
                  const auto count = targets.to(torch::kFloat64);
                  sums[1] += nll.masked_select(desirable).sum();
                  sums[2] += count.masked_select(desirable).sum();
                  sums[3] += nll.masked_select(~desirable).sum();
                  sums[4] += count.masked_select(~desirable).sum();
                  sums.narrow(0, kStats, model::kPreferenceStats) += terms.stats.cpu();
                });
  auto on_device = sums.to(s.device);
  s.comm.all_reduce_sum(on_device, "held-out kto totals");
  const auto total = on_device.cpu();
  const auto at = [&](int64_t i) { return total[i].item<double>(); };
  PairEvaluation e;
  e.loss = at(0) / std::max<double>(1, static_cast<double>(examples.size()));
  e.kl = kl.item<double>();
  e.desirable_loss = at(1) / std::max(1.0, at(2));
  e.undesirable_loss = at(3) / std::max(1.0, at(4));
  const double chosen = at(kStats + model::kChosenCount),
               rejected = at(kStats + model::kRejectedCount);
  if (chosen > 0 && rejected > 0)
    e.margin =
        at(kStats + model::kChosenReward) / chosen - at(kStats + model::kRejectedReward) / rejected;
  return e;
}

}  // namespace

PairEvaluation evaluate_pairs(const PairScoring& s, const model::PreferenceObjective& objective,
                              const std::vector<data::Example>& pairs,
                              const torch::Tensor& reference) {
  if (objective.unpaired()) return evaluate_unpaired(s, objective, pairs, reference);
  // Sums: pair losses, NLL (orpo), its tokens, pairs preferred, then the PreferenceStat values.
  constexpr int64_t kStats = 4;
  auto sums = torch::zeros({kStats + model::kPreferenceStats}, torch::kFloat64);
  for_each_pair_batch(
      s, pairs,
      [&](const std::vector<size_t>& indices, const data::MicroBatch& batch,
          const torch::Tensor& hidden, const torch::Tensor& lp, const torch::Tensor& targets) {
        const torch::Tensor ref = objective.uses_reference()
                                      ? reference_rows(reference, indices).to(s.device)
                                      : torch::Tensor();
        const auto terms = model::preference_terms(objective, lp, targets.to(s.device), ref);
        const auto n = static_cast<int64_t>(indices.size());
        sums[0] += terms.pair_loss_sum.item<double>();
        if (objective.adds_chosen_nll()) {
          sums[1] += chosen_sequence_nll(s.model, hidden, batch, s.chunk_rows).item<double>();
          for (size_t i : indices) sums[2] += static_cast<double>(chosen_sequence_tokens(pairs[i]));
        }
        const auto per_token = lp.to(torch::kCPU, torch::kFloat64) / targets.clamp_min(1);
        sums[3] += (per_token.narrow(0, 0, n) > per_token.narrow(0, n, n)).sum().item<double>();
        sums.narrow(0, kStats, model::kPreferenceStats) += terms.stats.cpu();
      });
  auto on_device = sums.to(s.device);
  s.comm.all_reduce_sum(on_device, "held-out pair totals");
  const auto total = on_device.cpu();
  const double count = std::max<double>(1, static_cast<double>(pairs.size()));
  const auto at = [&](int64_t i) { return total[i].item<double>(); };
  PairEvaluation e;
  e.loss = at(0) / count + at(1) / std::max(1.0, at(2));
  e.accuracy = at(kStats + model::kCorrectPairs) / count;
  e.margin = (at(kStats + model::kChosenReward) - at(kStats + model::kRejectedReward)) / count;
  e.preferred = at(3) / count;
  return e;
}

torch::Tensor chosen_sequence_nll(model::CausalLMImpl& model, const torch::Tensor& hidden,
                                  const data::MicroBatch& pairs, int64_t chunk_rows) {
  const auto labels = torch::tensor(data::whole_sequence_labels(pairs, pairs.pairs), torch::kInt64)
                          .view({pairs.pairs, pairs.length});
  return model::next_token_loss_sum(model, hidden.narrow(0, 0, pairs.pairs), labels, chunk_rows)
      .first;
}

int64_t chosen_sequence_tokens(const data::Example& pair) {
  return static_cast<int64_t>(pair.input_ids.size()) - 1;
}

torch::Tensor reference_rows(const torch::Tensor& reference, const std::vector<size_t>& indices) {
  std::vector<int64_t> picked(indices.begin(), indices.end());
  const auto rows = reference.index_select(0, torch::tensor(picked, torch::kInt64));
  return torch::cat({rows.select(1, 0), rows.select(1, 1)});
}

}  // namespace kubetune::train
