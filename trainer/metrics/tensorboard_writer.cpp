#include "trainer/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "trainer/metrics/step_record.h"
#include "trainer/metrics/tensorboard_event.pb.h"
#include "trainer/metrics/tfrecord.h"

namespace kubetune::metrics {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// events.out.tfevents.<seconds>.<host>.<pid>.0, TensorFlow's own naming: files sort by time.
std::string event_file_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return "events.out.tfevents." + std::to_string(static_cast<long long>(now_seconds())) + "." +
         host + "." + std::to_string(getpid()) + ".0";
}

}  // namespace

std::string tensorboard_tag(const std::string& key) {
  if (key == "eval_loss") return "eval/loss";
  return "train/" + key;
}

TensorBoardWriter::TensorBoardWriter(const std::string& output_dir) {
  const std::string dir = output_dir + "/tensorboard";
  std::filesystem::create_directories(dir);
  path_ = dir + "/" + event_file_name();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error("cannot write TensorBoard events to " + path_);
  tensorboard::Event first;
  first.set_wall_time(now_seconds());
  first.set_file_version("brain.Event:2");
  write_tfrecord(out_, first.SerializeAsString());
  out_.flush();
}

void TensorBoardWriter::write_scalars(int64_t step, const nlohmann::json& record) {
  tensorboard::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  auto* summary = event.mutable_summary();
  for (const auto& [key, value] : record.items()) {
    if (key == "step" || !value.is_number()) continue;
    auto* v = summary->add_value();
    v->set_tag(tensorboard_tag(key));
    v->set_simple_value(value.get<float>());
  }
  write_tfrecord(out_, event.SerializeAsString());
  out_.flush();  // a crash loses at most the step being written, as with the history file
}

void TensorBoardWriter::on_step(const train::StepStats& s) {
  write_scalars(s.step, step_record(s));
}

void TensorBoardWriter::on_eval(int64_t step, double eval_loss) {
  write_scalars(step, eval_record(step, eval_loss));
}

}  // namespace kubetune::metrics
