#include "trainer/loop/evaluate.h"

#include <torch/torch.h>

#include "trainer/data/batch.h"
#include "trainer/device/device.h"
#include "trainer/inputs/run_inputs.h"

namespace kubetune::train {
namespace {

// Loss and argmax hits of one row: position t predicts labels[t+1], as in the training loss.
ExampleScore score_row(model::CausalLMImpl& model, const torch::Tensor& hidden_row,
                       const torch::Tensor& labels_row) {
  auto targets = labels_row.slice(0, 1);
  auto mask = targets != -100;
  auto rows = hidden_row.slice(0, 0, hidden_row.size(0) - 1).index({mask});
  ExampleScore s;
  s.n_targets = mask.sum().item<int64_t>();
  if (s.n_targets == 0) return s;
  auto logits = model.logits(rows).to(torch::kFloat32);
  auto wanted = targets.index({mask});
  s.loss_sum =
      torch::nn::functional::cross_entropy(
          logits, wanted, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
          .item<double>();
  s.n_correct = (logits.argmax(-1) == wanted).sum().item<int64_t>();
  return s;
}

}  // namespace

std::vector<std::vector<size_t>> forward_batches(size_t n, int rank, int world,
                                                 int64_t micro_batch) {
  const auto step = static_cast<size_t>(world), size = static_cast<size_t>(micro_batch);
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(rank); i < n; i += step) mine.push_back(i);
  const size_t forwards = ((n + step - 1) / step + size - 1) / size;
  std::vector<std::vector<size_t>> batches(forwards);
  for (size_t k = 0; k < mine.size(); ++k) batches[k / size].push_back(mine[k]);
  return batches;
}

void pad_forward(model::CausalLMImpl& model, int32_t pad_id, const torch::Device& device) {
  auto pad = torch::full({1, 1}, static_cast<int64_t>(pad_id),
                         torch::TensorOptions().dtype(torch::kInt64).device(device));
  model.hidden_states(pad, torch::zeros_like(pad));
}

EvalResult evaluate(model::CausalLMImpl& model, const std::vector<data::Example>& examples,
                    int micro_batch, int32_t pad_id, const torch::Device& device,
                    torch::Dtype dtype, parallel::Communicator* comm) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  EvalResult result;
  for (const auto& indices : forward_batches(examples.size(), rank, world, micro_batch)) {
    AutocastScope autocast(device, dtype);
    if (indices.empty()) {
      pad_forward(model, pad_id, device);
      continue;
    }
    std::vector<const data::Example*> chunk;
    for (size_t i : indices) chunk.push_back(&examples[i]);
    auto batch = data::pad_batch(chunk, pad_id);
    auto t = to_tensors(batch, device);
    auto hidden = model.hidden_states(t.input_ids, t.position_ids, t.segment_ids);
    for (size_t row = 0; row < chunk.size(); ++row) {
      const auto length = static_cast<int64_t>(chunk[row]->input_ids.size());
      result.per_example.push_back(score_row(model, hidden[row].slice(0, 0, length),
                                             t.labels[row].slice(0, 0, length).to(device)));
    }
  }
  double totals_host[3] = {0, 0, 0};
  for (const auto& s : result.per_example) {
    totals_host[0] += s.loss_sum;
    totals_host[1] += static_cast<double>(s.n_targets);
    totals_host[2] += static_cast<double>(s.n_correct);
  }
  auto totals =
      torch::tensor({totals_host[0], totals_host[1], totals_host[2]}, torch::kFloat64).to(device);
  if (comm) comm->all_reduce_sum(totals, "evaluation totals");
  totals = totals.cpu();
  result.n_targets = static_cast<int64_t>(totals[1].item<double>());
  result.mean_loss = totals[0].item<double>() / std::max<double>(1, totals[1].item<double>());
  result.accuracy = totals[2].item<double>() / std::max<double>(1, totals[1].item<double>());
  if (was_training) model.train();
  return result;
}

std::vector<int32_t> prompt_of(const data::Example& example) {
  size_t first = 1;  // labels[0] is never a target
  while (first < example.labels.size() && example.labels[first] == -100) ++first;
  return {example.input_ids.begin(), example.input_ids.begin() + first};
}

std::vector<int32_t> reference_answer(const data::Example& example) {
  std::vector<int32_t> out;
  for (size_t t = 1; t < example.labels.size(); ++t) {
    if (example.labels[t] != -100) out.push_back(example.labels[t]);
  }
  return out;
}

std::vector<int32_t> greedy_answer(model::CausalLMImpl& model, const data::Example& example,
                                   const torch::Device& device, torch::Dtype dtype) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<int64_t> ids(example.input_ids.begin(), example.input_ids.end());
  ids.resize(prompt_of(example).size());
  std::vector<int32_t> answer;
  const int64_t wanted = data::count_targets(example);
  for (int64_t i = 0; i < wanted; ++i) {
    const auto n = static_cast<int64_t>(ids.size());
    auto input = torch::tensor(ids, torch::kInt64).view({1, n}).to(device);
    auto positions = torch::arange(n, torch::kInt64).view({1, n}).to(device);
    AutocastScope autocast(device, dtype);
    auto hidden = model.hidden_states(input, positions);
    const int64_t next = model.logits(hidden[0][n - 1].unsqueeze(0)).argmax(-1).item<int64_t>();
    answer.push_back(static_cast<int32_t>(next));
    ids.push_back(next);
  }
  if (was_training) model.train();
  return answer;
}

}  // namespace kubetune::train
