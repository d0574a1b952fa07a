#include "trainer/train/observers.h"

#include "trainer/train/history.h"
#include "trainer/train/progress.h"

namespace kubetune::train {

std::vector<std::unique_ptr<TrainingObserver>> make_observers(const TrainConfig& config,
                                                              const dist::DistEnv& env,
                                                              const torch::Device& device) {
  std::vector<std::unique_ptr<TrainingObserver>> observers;
  if (env.rank == 0) {
    observers.push_back(std::make_unique<ProgressPrinter>(config.log_every_steps));
    observers.push_back(std::make_unique<HistoryWriter>(config.output_dir));
  }
  (void)device;
  return observers;
}

}  // namespace kubetune::train
