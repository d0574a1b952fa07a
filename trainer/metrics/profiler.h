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
  // Writes the trace after the last profiled step; returns whether it did (the run paused there).
  bool after_step(int64_t step);
  // Whether `step` must be read back before the next one is queued: steps overlap (the next is
  // queued while one finishes), so without this the trace would also hold the GPU work of the
  // steps on either side of the profiled ones.
  bool drains_after(int64_t step) const { return step == first_ - 1 || step == last_; }

 private:
  std::string path_;
  int64_t first_ = 0, last_ = -1;
  bool active_ = false;
};

}  // namespace kubetune::train
