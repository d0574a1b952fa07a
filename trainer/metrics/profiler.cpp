#include "trainer/metrics/profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>

#include "common/log.h"

namespace kubetune::train {
namespace {

namespace prof = torch::profiler::impl;

std::set<prof::ActivityType> activities() {
  return {prof::ActivityType::CPU, prof::ActivityType::CUDA};
}

// Input shapes let bench/trace_summary.py count each GEMM's FLOPs (its achieved TFLOP/s, and the
// wide products apart from LoRA's narrow ones); they cost host time in the profiled steps only.
prof::ProfilerConfig config() {
  return prof::ProfilerConfig(prof::ProfilerState::KINETO, /*report_input_shapes=*/true);
}

}  // namespace

StepProfiler::StepProfiler(std::string output_dir, int rank) {
  const char* spec = std::getenv("KUBETUNE_PROFILE");
  if (spec == nullptr || *spec == '\0') return;
  long long first = 0, count = 0;
  if (std::sscanf(spec, "%lld:%lld", &first, &count) != 2 || first < 1 || count < 1)
    throw std::runtime_error("KUBETUNE_PROFILE must be FIRST:COUNT (steps, from 1), got \"" +
                             std::string(spec) + "\"");
  first_ = first;
  last_ = first + count - 1;
  std::filesystem::create_directories(output_dir);
  path_ = output_dir + "/trace_rank" + std::to_string(rank) + ".json";
  torch::autograd::profiler::prepareProfiler(config(), activities());
}

void StepProfiler::before_step(int64_t step) {
  if (step != first_) return;
  torch::autograd::profiler::enableProfiler(config(), activities());
  active_ = true;
}

bool StepProfiler::after_step(int64_t step) {
  if (!active_ || step != last_) return false;
  active_ = false;
  torch::autograd::profiler::disableProfiler()->save(path_);
  log::info() << "profile of steps " << first_ << "-" << last_ << " written to " << path_;
  return true;
}

}  // namespace kubetune::train
