// A Kineto trace of a few training steps, for finding where a step's time goes:
//   KUBETUNE_PROFILE=FIRST:COUNT kubetune-trainer train ...
// profiles steps FIRST .. FIRST+COUNT-1 (1-based, as in the progress lines) and writes
// <output.dir>/trace_rank<R>.json, which chrome://tracing, Perfetto or bench/trace_summary.py read.
#pragma once

#include <cstdint>
#include <string>

namespace kubetune::train {

class StepProfiler {
 public:
  StepProfiler(std::string output_dir, int rank);
  void before_step(int64_t step);  // `step` is the number of the step about to run
  void after_step(int64_t step);

 private:
  std::string path_;
  int64_t first_ = 0, last_ = -1;
  bool active_ = false;
};

}  // namespace kubetune::train
