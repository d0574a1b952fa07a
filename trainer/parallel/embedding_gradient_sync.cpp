#include "trainer/parallel/embedding_gradient_sync.h"

#include <torch/torch.h>

#include <algorithm>

namespace kubetune::parallel {

std::vector<int64_t> token_ids_in(const std::vector<data::Example>& examples,
                                  const std::vector<size_t>& indices, int32_t pad_id) {
  std::vector<int64_t> ids{pad_id};
  for (size_t i : indices) {
    ids.insert(ids.end(), examples[i].input_ids.begin(), examples[i].input_ids.end());
    if (const auto& rejected = examples[i].rejected)  // a pair: its other sequence's rows too
      ids.insert(ids.end(), rejected->input_ids.begin(), rejected->input_ids.end());
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

EmbeddingGradientSync::EmbeddingGradientSync(model::Embedding embedding,
                                             parallel::Communicator& comm)
    : embedding_(std::move(embedding)),
      comm_(comm),
      rows_(std::make_shared<model::EmbeddingRowGradients>()) {
  embedding_->row_gradients = rows_;
}

void EmbeddingGradientSync::begin_step(const std::vector<int64_t>& row_ids) {
  rows_->reset(torch::tensor(row_ids, torch::kInt64), embedding_->weight);
}

void EmbeddingGradientSync::finish_step() {
  torch::NoGradGuard no_grad;
  comm_.all_reduce_sum(rows_->rows, "embedding gradient rows");
  auto& weight = embedding_->weight;
  if (!weight.grad().defined()) weight.mutable_grad() = torch::zeros_like(weight);
  weight.mutable_grad().index_add_(0, rows_->row_ids, rows_->rows);
  rows_->rows.reset();  // [rows, hidden] is not needed until the next step
}

}  // namespace kubetune::parallel
