#include "trainer/plan/micro_batch.h"

#include <cmath>
#include <cstdio>
#include <vector>

#include "trainer/device/device.h"
#include "trainer/plan/memory_model.h"

namespace kubetune::train {
namespace {

// Divisors of n, largest first.
std::vector<int64_t> divisors_descending(int64_t n) {
  std::vector<int64_t> small, large;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  std::vector<int64_t> out(large.begin(), large.end());
  out.insert(out.end(), small.rbegin(), small.rend());
  return out;
}

std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / kGiB);
  return text;
}

int64_t estimated_peak(const model::ModelConfig& m, TrainConfig c, int world, int64_t size) {
  set_micro_batch_size(c, size);
  return estimate_gpu_memory(m, c, world).total();
}

}  // namespace

api::MicroBatchReport MicroBatchChoice::to_report() const {
  api::MicroBatchReport r;
  r.size = size;
  r.accumulation = accumulation;
  r.auto_ = automatic;
  r.reason = reason;
  r.candidates = candidates;
  return r;
}

int64_t examples_per_process(int64_t global_batch, int world) {
  if (global_batch < 1 || global_batch % world != 0)
    throw ConfigError({"training.globalBatchSize: " + std::to_string(global_batch) +
                       " does not split evenly over " + std::to_string(world) + " processes"});
  return global_batch / world;
}

MicroBatchChoice choose_micro_batch(const model::ModelConfig& m, const TrainConfig& c, int world,
                                    int64_t global_batch, std::optional<int64_t> gpu_memory_bytes) {
  const int64_t share = examples_per_process(global_batch, world);
  MicroBatchChoice choice;
  choice.automatic = true;
  if (!gpu_memory_bytes) {
    choice.size = share;
    choice.accumulation = 1;
    choice.reason = "no GPU memory to fit: the whole per-process share of the global batch (" +
                    std::to_string(share) + "); a GPU worker chooses from its GPU's memory";
    return choice;
  }
  const double budget = kAutoMemoryFraction * static_cast<double>(*gpu_memory_bytes);
  int64_t too_big = 0, too_big_peak = 0;
  for (const int64_t size : divisors_descending(share)) {
    const int64_t peak = estimated_peak(m, c, world, size);
    api::MicroBatchCandidate candidate;
    candidate.size = size;
    candidate.estimated_gib = rounded_gib(peak);
    choice.candidates.push_back(candidate);
    if (peak <= budget || size == 1) {
      choice.size = size;
      choice.accumulation = share / size;
      choice.reason = "largest micro-batch dividing " + std::to_string(share) +
                      " examples per process whose estimated peak (" + gib_text(peak) + ") " +
                      (peak <= budget ? "fits" : "does not fit, even at 1, into") + " " +
                      std::to_string(static_cast<int>(kAutoMemoryFraction * 100)) + "% of " +
                      gib_text(static_cast<double>(*gpu_memory_bytes)) +
                      (too_big > 0 ? "; " + std::to_string(too_big) + " would need " +
                                         gib_text(static_cast<double>(too_big_peak))
                                   : std::string());
      return choice;
    }
    too_big = size;
    too_big_peak = peak;
  }
  return choice;  // not reached: 1 divides every share
}

MicroBatchChoice resolve_micro_batch(TrainConfig& c, const model::ModelConfig& m, int world,
                                     int64_t global_batch,
                                     std::optional<int64_t> gpu_memory_bytes) {
  if (micro_batch_is_auto(c)) {
    MicroBatchChoice choice = choose_micro_batch(m, c, world, global_batch, gpu_memory_bytes);
    set_micro_batch_size(c, choice.size);
    return choice;
  }
  MicroBatchChoice choice;
  choice.size = micro_batch_size(c);
  choice.accumulation = examples_per_process(global_batch, world) / choice.size;
  choice.reason = "training.microBatchSize";
  return choice;
}

int64_t smaller_micro_batch(int64_t per_process, int64_t current) {
  for (const int64_t size : divisors_descending(per_process))
    if (size <= current / 2) return size;
  return 0;
}

}  // namespace kubetune::train
