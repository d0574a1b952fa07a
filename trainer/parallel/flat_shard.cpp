#include "trainer/parallel/flat_shard.h"

#include <torch/torch.h>

#include <algorithm>

namespace kubetune::parallel {

void FlatShard::add(const std::string& name, const torch::Tensor& tensor, int64_t align) {
  numel = (numel + align - 1) / align * align;
  members.push_back(tensor);
  names.push_back(name);
  offsets.push_back(numel);
  numel += tensor.numel();
}

void FlatShard::move_into_flat(int64_t padded, int rank, int world) {
  torch::NoGradGuard no_grad;
  mine = shard_of(padded, rank, world);
  flat = torch::zeros({padded}, members.front().options().requires_grad(false));
  for (size_t j = 0; j < members.size(); ++j) {
    auto& p = members[j];
    auto place = flat.narrow(0, offsets[j], p.numel());
    place.copy_(p.reshape(-1));
    p.set_data(place.view(p.sizes()));
  }
}

void FlatShard::allocate_moments(torch::ScalarType dtype) {
  exp_avg = torch::zeros({mine.size}, flat.options().dtype(dtype));
  exp_avg_sq = torch::zeros({mine.size}, flat.options().dtype(dtype));
}

void FlatShard::retype(torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  flat = torch::empty({flat.numel()}, flat.options().dtype(dtype));
  for (size_t j = 0; j < members.size(); ++j) {
    auto& p = members[j];
    p.set_data(flat.narrow(0, offsets[j], p.numel()).view(p.sizes()));
  }
}

std::optional<std::pair<int64_t, int64_t>> FlatShard::overlap(size_t j) const {
  const int64_t begin = std::max(offsets[j], mine.begin);
  const int64_t end = std::min(offsets[j] + members[j].numel(), mine.begin + mine.size);
  if (begin >= end) return std::nullopt;
  return std::pair{begin, end};
}

std::vector<optim::AdamWParam> FlatShard::optimizer_entries(const DecayRule& decays,
                                                            const torch::Tensor& master) const {
  std::vector<optim::AdamWParam> entries;
  for (size_t j = 0; j < members.size(); ++j) {
    const auto part = overlap(j);
    if (!part) continue;
    const auto [begin, end] = *part;
    const int64_t in_slice = begin - mine.begin, in_member = begin - offsets[j];
    optim::AdamWParam e{names[j],
                        master.defined() ? master : members[j],
                        decays(names[j], members[j]),
                        exp_avg.narrow(0, in_slice, end - begin),
                        exp_avg_sq.narrow(0, in_slice, end - begin),
                        master.defined() ? in_slice : in_member,
                        end - begin};
    if (master.defined()) e.named_offset = in_member;
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace kubetune::parallel
