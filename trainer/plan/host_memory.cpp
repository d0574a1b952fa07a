#include "trainer/plan/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace kubetune::train {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<int64_t> whole_number(const std::string& text) {
  try {
    const long long value = std::stoll(text);  // "max" throws: not a number
    if (value < 0) return std::nullopt;
    return static_cast<int64_t>(value);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string gib(int64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1LL << 30) << " GiB";
  return out.str();
}

}  // namespace

double recompute_input_element_bytes(const TrainConfig& c) {
  const bool full = c.method.type == api::MethodType::kFull,
             bf16 = c.model.dtype != api::ModelDtype::kFloat32;
  return (full || !bf16) ? 4.0 : 2.0;
}

int64_t offloaded_recompute_input_bytes(const model::ModelConfig& m, const TrainConfig& c) {
  if (!c.model.offload_checkpoints || m.num_hidden_layers < 2) return 0;
  const double tokens =
      static_cast<double>(micro_batch_size(c) * sequences_per_example(c) * c.data.max_length);
  return static_cast<int64_t>(tokens * static_cast<double>(m.hidden_size) *
                              recompute_input_element_bytes(c) *
                              static_cast<double>(m.num_hidden_layers - 1));
}

std::optional<int64_t> meminfo_available_bytes(const std::string& meminfo) {
  std::istringstream lines(meminfo);
  std::string line;
  const std::string key = "MemAvailable:";
  while (std::getline(lines, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const auto kib = whole_number(line.substr(key.size()));  // "   123456 kB"
    if (kib) return *kib * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> cgroup_room_bytes(const std::string& memory_max,
                                         const std::string& memory_current) {
  const auto max = whole_number(memory_max), current = whole_number(memory_current);
  if (!max || !current) return std::nullopt;  // "max": no limit
  return std::max<int64_t>(0, *max - *current);
}

std::optional<int64_t> available_host_memory() {
  auto available = meminfo_available_bytes(read_file("/proc/meminfo"));
  const auto room = cgroup_room_bytes(read_file("/sys/fs/cgroup/memory.max"),
                                      read_file("/sys/fs/cgroup/memory.current"));
  if (room) available = available ? std::min(*available, *room) : *room;
  return available;
}

std::optional<std::string> offload_host_memory_error(int64_t need, int processes,
                                                     int64_t available) {
  const int64_t total = need * processes;
  if (total <= available) return std::nullopt;
  return "model.offloadCheckpoints: the layers' saved inputs need " + gib(need) +
         " of pinned host memory per process (" + std::to_string(processes) +
         " on this machine: " + gib(total) + "), and " + gib(available) +
         " is available here; lower data.maxLength or training.microBatchSize, give the workers "
         "more memory (workers.resources.memory), or turn model.offloadCheckpoints off";
}

}  // namespace kubetune::train
