#include "trainer/loop/checkpoint.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "common/log.h"
#include "common/strict_json.h"
#include "trainer/io/file_digest.h"
#include "trainer/io/safetensors.h"

namespace fs = std::filesystem;

namespace kubetune::train {
namespace {

const std::regex kCheckpointName(R"(step-(\d{8}))");
const char* const kStateFile = "trainer_state.json";

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

// Size and digest of every file of a checkpoint folder but the state file that lists them.
// `known` has the digests taken while writing (the large files); the rest are read back.
nlohmann::json describe_files(const fs::path& dir,
                              const std::map<std::string, std::string>& known) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().filename() == kStateFile) continue;
    const std::string name = fs::relative(entry.path(), dir).string();
    const auto it = known.find(name);
    files[name] = {{"bytes", entry.file_size()},
                   {"xxh3", it != known.end() ? it->second : io::file_xxh3(entry.path())}};
  }
  return files;
}

// Every file the state lists is there with its size and digest: flipped bits, a truncated or a
// replaced file all fail here, naming the file.
void verify_files(const fs::path& dir, const nlohmann::json& files) {
  for (const auto& [name, want] : files.items()) {
    const fs::path path = dir / name;
    if (!fs::is_regular_file(path)) throw std::runtime_error(path.string() + ": missing");
    if (fs::file_size(path) != want.at("bytes").get<uint64_t>())
      throw std::runtime_error(path.string() + ": " + std::to_string(fs::file_size(path)) +
                               " bytes, the checkpoint recorded " + want.at("bytes").dump());
    if (io::file_xxh3(path) != want.at("xxh3").get<std::string>())
      throw std::runtime_error(path.string() +
                               ": contents differ from those written (checksum mismatch)");
  }
}

// The step a checkpoint folder's name says it holds, or -1 for a folder named otherwise (an
// explicit checkpoint.resume path may be any folder).
int64_t step_in_name(const fs::path& dir) {
  std::smatch m;
  const std::string name = dir.filename().string();
  return std::regex_match(name, m, kCheckpointName) ? std::stoll(m[1].str()) : -1;
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
  auto count = [&](const char* key, int64_t minimum) {
    const nlohmann::json& v = j.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < minimum)
      throw std::runtime_error(std::string("field \"") + key + "\": expected an integer >= " +
                               std::to_string(minimum) + ", got " + v.dump());
    return v.get<int64_t>();
  };
  TrainerState s;
  s.step = count("step", 0);
  s.tokens_seen = count("tokens_seen", 0);
  s.samples_seen = count("samples_seen", 0);
  s.global_batch = count("global_batch", 1);
  s.world_size = static_cast<int>(count("world_size", 1));
  s.seed = j.at("seed");
  s.method = j.at("method");
  return s;
}

std::string save_checkpoint(const std::string& dir, const TrainerState& state,
                            const NamedTensors& trainable, const NamedTensors& optimizer,
                            const std::function<void(const std::string&)>& extra) {
  const fs::path final_dir = checkpoint_path(dir, state.step);
  const fs::path tmp_dir = fs::path(dir) / ("." + final_dir.filename().string() + ".partial-" +
                                            std::to_string(getpid()));
  fs::create_directories(dir);
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  NamedTensors cpu_trainable, cpu_optimizer;
  for (const auto& [n, t] : trainable)
    cpu_trainable.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  for (const auto& [n, t] : optimizer)
    cpu_optimizer.emplace_back(n, t.detach().to(torch::kCPU).contiguous());
  std::map<std::string, std::string> digests;
  for (const auto& [file, tensors] : {std::pair{"trainable.safetensors", &cpu_trainable},
                                      std::pair{"optimizer.safetensors", &cpu_optimizer}})
    digests[file] = io::save_safetensors((tmp_dir / file).string(), *tensors);
  if (extra) extra(tmp_dir.string());
  // The state file is written last: its presence is what marks the folder complete, and it lists
  // every other file with its checksum.
  nlohmann::json state_json = state.to_json();
  state_json["files"] = describe_files(tmp_dir, digests);
  write_json_file(tmp_dir / kStateFile, state_json);
  for (const auto& entry : fs::directory_iterator(tmp_dir)) sync_path(entry.path());
  sync_path(tmp_dir);

  fs::remove_all(final_dir);  // a checkpoint of the same step from an earlier, failed attempt
  fs::rename(tmp_dir, final_dir);
  sync_path(dir);
  return final_dir.string();
}

std::string checkpoint_path(const std::string& dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", static_cast<long>(step));
  return (fs::path(dir) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> found;
  if (!fs::is_directory(dir)) return found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory() &&
        std::regex_match(entry.path().filename().string(), kCheckpointName) &&
        fs::exists(entry.path() / kStateFile))
      found.push_back(entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());  // zero-padded names sort by step
  return found;
}

namespace {

CheckpointContents read_checkpoint(const std::string& path, bool verify) {
  CheckpointContents c;
  c.path = path;
  const fs::path state_path = fs::path(path) / kStateFile;
  if (!fs::exists(state_path))
    throw std::runtime_error(state_path.string() + ": missing (not a complete checkpoint)");
  const nlohmann::json state_json = read_json_file_strict(state_path.string());
  try {
    c.state = TrainerState::from_json(state_json);
  } catch (const std::exception& e) {
    throw std::runtime_error(state_path.string() + ": " + without_json_exception_tag(e.what()));
  }
  const int64_t named_step = step_in_name(path);
  if (named_step >= 0 && named_step != c.state.step)
    throw std::runtime_error(state_path.string() + ": says step " + std::to_string(c.state.step) +
                             " in a folder named for step " + std::to_string(named_step));
  if (!state_json.contains("files")) {
    log::warn() << path
                << ": no checksums recorded (written before checkpoints carried them); files not "
                   "verified";
  } else if (verify) {
    verify_files(path, state_json["files"]);
  }
  c.trainable = read_all(fs::path(path) / "trainable.safetensors");
  c.optimizer = read_all(fs::path(path) / "optimizer.safetensors");
  return c;
}

}  // namespace

CheckpointContents load_checkpoint(const std::string& path, bool verify_files) {
  try {
    return read_checkpoint(path, verify_files);
  } catch (const std::filesystem::filesystem_error&) {
    throw;  // the volume, not the checkpoint
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const CheckpointUnusable&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointUnusable(e.what());
  }
}

std::optional<CheckpointContents> load_latest_checkpoint(const std::string& dir,
                                                         const ResumeCheck& fits_run) {
  const auto all = list_checkpoints(dir);
  std::string reasons;
  for (const auto& path : all) {
    try {
      CheckpointContents c = load_checkpoint(path);
      if (fits_run) fits_run(c);
      return c;
    } catch (const CheckpointUnusable& e) {
      log::warn() << "skipping checkpoint " << path << ": " << e.what();
      reasons += "\n  " + path + ": " + e.what();
    }
  }
  // Checkpoints exist but none can be resumed: starting over would silently drop that work, and
  // pruning would later delete it. The user decides.
  if (!all.empty())
    throw CheckpointUnusable("none of the " + std::to_string(all.size()) + " checkpoints in " +
                             dir + " can be resumed:" + reasons +
                             "\nto start over, move them away or set checkpoint.resume: never");
  return std::nullopt;
}

void prune_checkpoints(const std::string& dir, int keep) {
  auto all = list_checkpoints(dir);
  for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace kubetune::train
