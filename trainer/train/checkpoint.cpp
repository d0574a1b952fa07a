#include "trainer/train/checkpoint.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "common/log.h"
#include "trainer/io/safetensors.h"

namespace fs = std::filesystem;

namespace kubetune::train {
namespace {

const std::regex kCheckpointName(R"(step-(\d{8}))");

void write_json_file(const fs::path& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.flush();
  if (!out) throw std::runtime_error(path.string() + ": write failed");
}

// fsync a file or folder so the rename that publishes a checkpoint is ordered after its contents.
void sync_path(const fs::path& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return;
  fsync(fileno(f));
  std::fclose(f);
}

NamedTensors read_all(const fs::path& path) {
  io::SafetensorsFile file(path.string());
  NamedTensors out;
  for (const auto& name : file.names()) out.emplace_back(name, file.tensor(name).clone());
  return out;
}

}  // namespace

nlohmann::json TrainerState::to_json() const {
  return {{"step", step},
          {"tokens_seen", tokens_seen},
          {"samples_seen", samples_seen},
          {"global_batch", global_batch},
          {"world_size", world_size},
          {"seed", seed},
          {"method", method}};
}

TrainerState TrainerState::from_json(const nlohmann::json& j) {
  TrainerState s;
  s.step = j.at("step");
  s.tokens_seen = j.at("tokens_seen");
  s.samples_seen = j.at("samples_seen");
  s.global_batch = j.at("global_batch");
  s.world_size = j.at("world_size");
  s.seed = j.at("seed");
  s.method = j.at("method");
  return s;
}

std::string save_checkpoint(const std::string& dir, const TrainerState& state,
                            const NamedTensors& trainable, const NamedTensors& optimizer,
                            const std::function<void(const std::string&)>& extra) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", static_cast<long>(state.step));
  const fs::path final_dir = fs::path(dir) / name;
  const fs::path tmp_dir =
      fs::path(dir) / (std::string(".") + name + ".partial-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  NamedTensors cpu_trainable, cpu_optimizer;
  for (const auto& [n, t] : trainable)
    cpu_trainable.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  for (const auto& [n, t] : optimizer)
    cpu_optimizer.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  io::save_safetensors((tmp_dir / "trainable.safetensors").string(), cpu_trainable);
  io::save_safetensors((tmp_dir / "optimizer.safetensors").string(), cpu_optimizer);
  if (extra) extra(tmp_dir.string());
  // The state file is written last: its presence is what marks the folder complete.
  write_json_file(tmp_dir / "trainer_state.json", state.to_json());
  for (const auto& entry : fs::directory_iterator(tmp_dir)) sync_path(entry.path());
  sync_path(tmp_dir);

  fs::remove_all(final_dir);  // a checkpoint of the same step from an earlier, failed attempt
  fs::rename(tmp_dir, final_dir);
  sync_path(dir);
  return final_dir.string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> found;
  if (!fs::is_directory(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() &&
        std::regex_match(entry.path().filename().string(), kCheckpointName) &&
        fs::exists(entry.path() / "trainer_state.json"))
      found.push_back(entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());  // zero-padded names sort by step
  return found;
}

CheckpointContents load_checkpoint(const std::string& path) {
  CheckpointContents c;
  c.path = path;
  const fs::path state_path = fs::path(path) / "trainer_state.json";
  std::ifstream in(state_path);
  if (!in) throw std::runtime_error(state_path.string() + ": missing (not a complete checkpoint)");
  try {
    c.state = TrainerState::from_json(nlohmann::json::parse(in));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(state_path.string() + ": " + e.what());
  }
  c.trainable = read_all(fs::path(path) / "trainable.safetensors");
  c.optimizer = read_all(fs::path(path) / "optimizer.safetensors");
  return c;
}

std::optional<CheckpointContents> load_latest_checkpoint(const std::string& dir) {
  for (const auto& path : list_checkpoints(dir)) {
    try {
      return load_checkpoint(path);
    } catch (const std::exception& e) {
      log::warn() << "skipping damaged checkpoint " << path << ": " << e.what();
    }
  }
  return std::nullopt;
}

void prune_checkpoints(const std::string& dir, int keep) {
  auto all = list_checkpoints(dir);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace kubetune::train
