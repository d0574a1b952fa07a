// TensorBoard event files for people who watch runs there (as the HF Trainer's
// report_to="tensorboard"): every number of metrics_history.jsonl becomes a scalar, tagged
// "train/<key>" ("eval/loss" for evaluations), in <output.dir>/tensorboard/events.out.tfevents.*.
// A resumed run writes a new file beside the old ones; TensorBoard reads them as one run.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "trainer/metrics/step_stats.h"

namespace kubetune::metrics {

class TensorBoardWriter : public train::TrainingObserver {
 public:
  explicit TensorBoardWriter(const std::string& output_dir);
  void on_step(const train::StepStats& s) override;
  void on_eval(int64_t step, double eval_loss) override;

  const std::string& path() const { return path_; }

 private:
  void write_scalars(int64_t step, const nlohmann::json& record);

  std::string path_;
  std::ofstream out_;
};

// The tag of a history key: "loss" -> "train/loss", "eval_loss" -> "eval/loss".
std::string tensorboard_tag(const std::string& history_key);

}  // namespace kubetune::metrics
