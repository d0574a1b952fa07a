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
const std::regex kPartListName(R"(part-\d{5}-of-\d{5}\.json)");
const std::regex kPartFileName(R"((trainable|optimizer)-(\d{5})-of-(\d{5})\.safetensors)");
const char* const kStateFile = "trainer_state.json";

// "-00001-of-00004": which process's part a file is.
std::string part_suffix(int rank, int world) {
  char text[32];
  std::snprintf(text, sizeof text, "-%05d-of-%05d", rank, world);
  return text;
}

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

// A file's tensors as pieces of `out`: a part's flat "<name>@<first element>" pieces, or the whole
// tensors of a checkpoint of one file each (written before parts).
void add_file(const fs::path& path, bool is_part, StoredTensors& out) {
  auto file = std::make_shared<io::SafetensorsFile>(path.string());
  nlohmann::json shapes;
  if (is_part) shapes = nlohmann::json::parse(file->metadata().at("shapes").get<std::string>());
  for (const auto& key : file->names()) {
    const torch::Tensor values = file->tensor(key);  // a view into the mapped file
    if (!is_part) {
      out.add(key, values.sizes().vec(), 0, values.reshape(-1), file);
      continue;
    }
    const size_t at = key.rfind('@');
    if (at == std::string::npos)
      throw CheckpointUnusable(path.string() + ": tensor \"" + key + "\" is not a piece");
    const std::string name = key.substr(0, at);
    out.add(name, shapes.at(name).get<std::vector<int64_t>>(), std::stoll(key.substr(at + 1)),
            values.reshape(-1), file);
  }
}

// The tensors of `kind` ("trainable", "optimizer") in every process's part file.
StoredTensors read_parts(const fs::path& dir, const std::string& kind) {
  std::map<int, fs::path> parts;
  int world = -1;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kPartFileName) || m[1].str() != kind) continue;
    const int of = std::stoi(m[3].str());
    if (world >= 0 && of != world)
      throw CheckpointUnusable(name + ": a part of " + std::to_string(of) + " beside parts of " +
                               std::to_string(world));
    world = of;
    parts[std::stoi(m[2].str())] = entry.path();
  }
  if (world < 0) throw CheckpointUnusable(kind + "-*.safetensors: missing");
  StoredTensors out;
  for (int r = 0; r < world; ++r) {
    if (!parts.count(r))
      throw CheckpointUnusable(kind + part_suffix(r, world) + ".safetensors: missing");
    add_file(parts[r], true, out);
  }
  out.check_complete(kind);
  return out;
}

StoredTensors read_whole_file(const fs::path& path) {
  StoredTensors out;
  add_file(path, false, out);
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

const std::vector<int64_t>& StoredTensors::shape(const std::string& name) const {
  return entries_.at(name).shape;
}

void StoredTensors::add(const std::string& name, const std::vector<int64_t>& shape, int64_t offset,
                        const torch::Tensor& values, std::shared_ptr<const void> keep_alive) {
  Entry& e = entries_[name];
  if (e.pieces.empty()) e.shape = shape;
  if (e.shape != shape)
    throw CheckpointUnusable("tensor \"" + name + "\": its parts disagree on its shape");
  if (offset < 0 || offset + values.numel() > c10::multiply_integers(shape))
    throw CheckpointUnusable("tensor \"" + name + "\": a piece at element " +
                             std::to_string(offset) + " lies outside it");
  e.pieces.push_back({offset, values, std::move(keep_alive)});
}

void StoredTensors::check_complete(const std::string& kind) const {
  for (const auto& [name, e] : entries_) {
    std::vector<std::pair<int64_t, int64_t>> covered;
    for (const auto& p : e.pieces) covered.emplace_back(p.offset, p.offset + p.values.numel());
    std::sort(covered.begin(), covered.end());
    int64_t next = 0;
    for (const auto& [begin, end] : covered) {
      if (begin != next)
        throw CheckpointUnusable(kind + " tensor \"" + name + "\": elements " +
                                 std::to_string(std::min(begin, next)) + " to " +
                                 std::to_string(std::max(begin, next)) +
                                 (begin > next ? " are in no part" : " are in two parts"));
      next = end;
    }
    if (next != c10::multiply_integers(e.shape))
      throw CheckpointUnusable(kind + " tensor \"" + name + "\": elements from " +
                               std::to_string(next) + " on are in no part");
  }
}

torch::Tensor StoredTensors::read(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw std::runtime_error("no tensor \"" + name + "\"");
  const Entry& e = it->second;
  auto whole = torch::empty({c10::multiply_integers(e.shape)}, e.pieces.front().values.options());
  for (const auto& p : e.pieces) whole.narrow(0, p.offset, p.values.numel()).copy_(p.values);
  return whole.view(e.shape);
}

std::string partial_checkpoint_path(const std::string& dir, int64_t step) {
  return (fs::path(dir) /
          ("." + fs::path(checkpoint_path(dir, step)).filename().string() + ".partial"))
      .string();
}

void begin_checkpoint(const std::string& dir, int64_t step) {
  const fs::path tmp_dir = partial_checkpoint_path(dir, step);
  fs::create_directories(dir);
  fs::remove_all(tmp_dir);  // left by an attempt that died while writing
  fs::create_directories(tmp_dir);
}

void write_checkpoint_part(const std::string& dir, int64_t step, int rank, int world,
                           const CheckpointPart& part) {
  const fs::path tmp_dir = partial_checkpoint_path(dir, step);
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [kind, pieces] :
       {std::pair{"trainable", &part.trainable}, std::pair{"optimizer", &part.optimizer}}) {
    const std::string file = kind + part_suffix(rank, world) + ".safetensors";
    nlohmann::json shapes = nlohmann::json::object();
    NamedTensors tensors;
    for (const TensorPiece& p : *pieces) {
      shapes[p.name] = p.shape;
      tensors.emplace_back(p.name + "@" + std::to_string(p.offset), p.values.detach());
    }
    const std::string digest =
        io::save_safetensors((tmp_dir / file).string(), tensors, {{"shapes", shapes.dump()}});
    files[file] = {{"bytes", fs::file_size(tmp_dir / file)}, {"xxh3", digest}};
  }
  write_json_file(tmp_dir / ("part" + part_suffix(rank, world) + ".json"), files);
}

std::string publish_checkpoint(const std::string& dir, const TrainerState& state,
                               const std::function<void(const std::string&)>& extra) {
  const fs::path final_dir = checkpoint_path(dir, state.step);
  const fs::path tmp_dir = partial_checkpoint_path(dir, state.step);
  if (extra) extra(tmp_dir.string());
  // The digests the processes took while writing their parts; the small files are read back.
  std::map<std::string, std::string> digests;
  for (const auto& entry : fs::directory_iterator(tmp_dir)) {
    if (!std::regex_match(entry.path().filename().string(), kPartListName)) continue;
    const nlohmann::json files = read_json_file_strict(entry.path().string());
    for (const auto& [file, described] : files.items())
      digests[file] = described.at("xxh3").get<std::string>();
  }
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
  if (fs::exists(fs::path(path) / "trainable.safetensors")) {  // written by one process, before
    c.trainable = read_whole_file(fs::path(path) / "trainable.safetensors");
    c.optimizer = read_whole_file(fs::path(path) / "optimizer.safetensors");
  } else {
    c.trainable = read_parts(path, "trainable");
    c.optimizer = read_parts(path, "optimizer");
  }
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
