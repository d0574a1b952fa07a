#include "trainer/model/adapter_copies.h"

#include <atomic>

namespace kubetune::model {
namespace {

// Forwards started so far (forget_compute_copies): a copy is current only in the one that made it.
std::atomic<uint64_t> forwards{1};

}  // namespace

void forget_compute_copies() { ++forwards; }

torch::Tensor ComputeCopy::of(const torch::Tensor& weight, at::ScalarType dtype) const {
  const bool current = values_.defined() && forward_ == forwards.load() &&
                       values_.scalar_type() == dtype && weight.data_ptr() == source_ &&
                       weight._version() == version_;
  return current ? values_ : weight.to(dtype);
}

void refresh_compute_copies(const std::vector<std::pair<ComputeCopy*, torch::Tensor>>& weights,
                            at::ScalarType dtype) {
  std::vector<std::pair<ComputeCopy*, torch::Tensor>> todo;
  int64_t total = 0;
  for (const auto& [copy, weight] : weights) {
    if (weight.scalar_type() == dtype) continue;
    todo.emplace_back(copy, weight);
    total += weight.numel();
  }
  if (todo.empty()) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor buffer = at::empty({total}, todo.front().second.options().dtype(dtype));
  std::vector<torch::Tensor> views, sources;
  int64_t offset = 0;
  for (const auto& [copy, weight] : todo) {
    views.push_back(buffer.narrow(0, offset, weight.numel()).view(weight.sizes()));
    sources.push_back(weight.detach());
    offset += weight.numel();
  }
  at::_foreach_copy_(views, sources);
  for (size_t i = 0; i < todo.size(); ++i) {
    auto& [copy, weight] = todo[i];
    copy->values_ = views[i];
    copy->version_ = weight._version();
    copy->source_ = weight.data_ptr();
    copy->forward_ = forwards.load();
  }
}

}  // namespace kubetune::model
