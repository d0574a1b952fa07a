#include "trainer/parallel/bucketed_gradients.h"

#include <torch/torch.h>

#include <algorithm>

namespace kubetune::parallel {
namespace {

// The tensors the buckets reduce, in the order backward produces their gradients (buckets go in
// order, each once all its gradients are ready): the reverse of the model's order. A tied
// embedding summed by rows gets from autograd only the output layer's part, which comes first;
// an untied one leaves the buckets.
model::NamedParams in_gradient_order(model::CausalLM& model, const model::NamedParams& trainable,
                                     bool embedding_by_rows,
                                     const std::function<bool(const torch::Tensor&)>& elsewhere) {
  const auto& embedding = model->model->embed_tokens->weight;
  model::NamedParams out;
  for (size_t k = trainable.tensors.size(); k-- > 0;) {
    const auto& t = trainable.tensors[k];
    if (elsewhere && elsewhere(t)) continue;
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

}  // namespace

BucketedGradients::BucketedGradients(Communicator& comm, model::CausalLM& model,
                                     const model::NamedParams& trainable, double bucket_mb,
                                     bool embedding_by_rows,
                                     const std::function<bool(const torch::Tensor&)>& elsewhere)
    : comm_(comm) {
  if (embedding_by_rows)
    embedding_rows_ = std::make_unique<EmbeddingGradientSync>(model->model->embed_tokens, comm);
  tensors_ = in_gradient_order(model, trainable, embedding_by_rows, elsewhere);
  if (!tensors_.tensors.empty()) plan_ = plan_gradient_buckets(tensors_.tensors, bucket_mb);
}

bool BucketedGradients::contains(const torch::Tensor& t) const {
  return std::any_of(tensors_.tensors.begin(), tensors_.tensors.end(),
                     [&](const torch::Tensor& b) { return b.is_same(t); });
}

void BucketedGradients::attach(Communicator::Reduction reduction) {
  if (!tensors_.tensors.empty())
    comm_.attach_gradient_sync(tensors_.tensors, tensors_.names, plan_, reduction);
}

void BucketedGradients::begin_step(const std::function<std::vector<int64_t>()>& rows) {
  if (embedding_rows_) embedding_rows_->begin_step(rows());
}

void BucketedGradients::finish_step() {
  if (embedding_rows_) embedding_rows_->finish_step();
}

torch::Tensor zero_loss(const model::NamedParams& trainable) {
  auto total = torch::zeros({}, trainable.tensors.front().options());
  for (const auto& p : trainable.tensors) total = total + p.reshape(-1).narrow(0, 0, 0).sum();
  return total;
}

}  // namespace kubetune::parallel
