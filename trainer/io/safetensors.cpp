#include "trainer/io/safetensors.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <tuple>

#include "common/strict_json.h"
#include "trainer/io/file_digest.h"

namespace kubetune::io {
namespace {

using nlohmann::json;

const std::vector<std::pair<std::string, at::ScalarType>>& dtype_table() {
  static const std::vector<std::pair<std::string, at::ScalarType>> table = {
      {"F64", at::kDouble},
      {"F32", at::kFloat},
      {"F16", at::kHalf},
      {"BF16", at::kBFloat16},
      {"I64", at::kLong},
      {"I32", at::kInt},
      {"I16", at::kShort},
      {"I8", at::kChar},
      {"U8", at::kByte},
      {"BOOL", at::kBool},
      {"U16", at::kUInt16},
      {"U32", at::kUInt32},
      {"U64", at::kUInt64},
      {"F8_E4M3", at::kFloat8_e4m3fn},
      {"F8_E5M2", at::kFloat8_e5m2}};
  return table;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": " + what);
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

std::string safetensors_dtype_name(at::ScalarType t) {
  for (const auto& [name, type] : dtype_table())
    if (type == t) return name;
  throw std::runtime_error(std::string("safetensors cannot store dtype ") + c10::toString(t));
}

at::ScalarType safetensors_dtype(const std::string& name) {
  for (const auto& [n, type] : dtype_table())
    if (n == name) return type;
  throw std::runtime_error("unsupported safetensors dtype \"" + name + "\"");
}

// The read-only, private mapping of a whole file; unmapped when the last tensor view dies.
struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  size_t data_start = 0;  // 8 + header length
  ~Mapping() {
    if (addr != nullptr && addr != MAP_FAILED) munmap(addr, size);
  }
  const char* data() const { return static_cast<const char*>(addr) + data_start; }
};

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), map_(std::make_shared<Mapping>()) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, "cannot open safetensors file: " + errno_text());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, "cannot stat: " + errno_text());
  }
  map_->size = static_cast<size_t>(st.st_size);
  if (map_->size < 8) {
    ::close(fd);
    fail(path, "truncated safetensors file (" + std::to_string(map_->size) + " bytes, no header)");
  }
  // Private + writable: copy-on-write pages, so in-place ops on a view cannot corrupt the file.
  map_->addr = mmap(nullptr, map_->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_->addr == MAP_FAILED) fail(path, "cannot mmap: " + errno_text());

  uint64_t header_len = 0;
  std::memcpy(&header_len, map_->addr, 8);  // little-endian on every platform we target
  if (header_len > map_->size - 8)
    fail(path, "truncated safetensors file: header of " + std::to_string(header_len) +
                   " bytes but the file has " + std::to_string(map_->size) + " bytes");
  map_->data_start = 8 + header_len;
  const json header =
      parse_json_strict(std::string_view(static_cast<const char*>(map_->addr) + 8, header_len),
                        path + ": safetensors header");
  if (!header.is_object()) fail(path, "malformed safetensors header: not a JSON object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      metadata_ = it.value();
      continue;
    }
    try {
      entries_.emplace(it.key(), read_entry(it.value()));
    } catch (const std::exception& ex) {
      fail(path, "tensor \"" + it.key() + "\": " + without_json_exception_tag(ex.what()));
    }
  }
  check_layout(map_->size - map_->data_start);
}

// One header entry; its byte size must be what its dtype and shape say.
SafetensorsFile::Entry SafetensorsFile::read_entry(const json& e) {
  Entry entry{safetensors_dtype(e.at("dtype").get<std::string>()),
              e.at("shape").get<std::vector<int64_t>>(), e.at("data_offsets").at(0).get<size_t>(),
              e.at("data_offsets").at(1).get<size_t>()};
  if (e.at("data_offsets").size() != 2)
    throw std::runtime_error("data_offsets must be [begin, end]");
  // Checked multiplication: a huge or negative dimension must not wrap into a plausible size.
  size_t bytes = at::elementSize(entry.dtype);
  for (int64_t d : entry.shape) {
    if (d < 0) throw std::runtime_error("negative dimension in shape");
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(d), &bytes))
      throw std::runtime_error("shape too large");
  }
  if (entry.end < entry.begin || entry.end - entry.begin != bytes)
    throw std::runtime_error("data_offsets do not match its dtype and shape");
  return entry;
}

// The rule of the reference implementation (safetensors' Metadata::validate): the tensors tile the
// data section exactly, from byte 0 to its end, without gaps or overlaps. A header length that is
// off by one, overlapping tensors or trailing bytes all break it; reading on would give shifted or
// shared bytes, which train into NaNs instead of failing.
void SafetensorsFile::check_layout(size_t data_size) const {
  // By (begin, end): an empty tensor [x, x] goes before the tensor that starts at x.
  std::vector<std::tuple<size_t, size_t, const std::string*>> by_offset;
  for (const auto& [name, e] : entries_) by_offset.emplace_back(e.begin, e.end, &name);
  std::sort(by_offset.begin(), by_offset.end());
  size_t expected = 0;
  for (const auto& [begin, end, name] : by_offset) {
    const Entry& e = entries_.at(*name);
    if (e.end > data_size)
      fail(path_, "truncated safetensors file: tensor \"" + *name + "\" ends at byte " +
                      std::to_string(map_->data_start + e.end) + " but the file has " +
                      std::to_string(map_->size) + " bytes");
    if (begin != expected)
      fail(path_, "tensor \"" + *name + "\" starts at data byte " + std::to_string(begin) +
                      ", expected " + std::to_string(expected) +
                      (begin < expected ? " (it overlaps the tensor before it)"
                                        : " (a gap, or a wrong header length)"));
    expected = e.end;
  }
  if (expected != data_size)
    fail(path_, "the data section has " + std::to_string(data_size) +
                    " bytes but its tensors "
                    "cover " +
                    std::to_string(expected) +
                    " (trailing bytes, or a wrong header "
                    "length)");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::pair<size_t, std::string>> order;
  for (const auto& [name, e] : entries_) order.emplace_back(e.begin, name);
  std::sort(order.begin(), order.end());
  std::vector<std::string> out;
  for (auto& [offset, name] : order) out.push_back(std::move(name));
  return out;
}

bool SafetensorsFile::contains(const std::string& name) const { return entries_.count(name) > 0; }

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail(path_, "no tensor named \"" + name + "\"");
  const Entry& e = it->second;
  void* ptr = const_cast<char*>(map_->data()) + e.begin;
  auto opts = at::TensorOptions().dtype(e.dtype).device(at::kCPU);
  auto keep_alive = map_;
  at::Tensor view = at::from_blob(
      ptr, e.shape, [keep_alive](void*) {}, opts);
  // safetensors does not promise alignment; kernels may assume element alignment, so copy then.
  if (reinterpret_cast<uintptr_t>(ptr) % at::elementSize(e.dtype) != 0) return view.clone();
  return view;
}

std::string save_safetensors(const std::string& path,
                             const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<DeferredTensor> deferred;
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) fail(path, "tensor \"" + name + "\" is undefined");
    deferred.push_back({name, t.scalar_type(), t.sizes().vec(), [t] { return t; }});
  }
  return save_safetensors(path, deferred, metadata);
}

std::string save_safetensors(const std::string& path, const std::vector<DeferredTensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) fail(path, "duplicate tensor name \"" + t.name + "\"");
    const size_t bytes = static_cast<size_t>(c10::multiply_integers(t.shape)) *
                         static_cast<size_t>(c10::elementSize(t.dtype));
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data section 8-byte aligned

  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) fail(tmp, "cannot create: " + errno_text());
  Xxh3 digest;
  auto abandon = [&](const std::string& why) {
    std::fclose(f);
    std::remove(tmp.c_str());
    fail(tmp, why);
  };
  auto write = [&](const void* data, size_t n) {
    digest.update(data, n);
    if (n > 0 && std::fwrite(data, 1, n, f) != n) abandon("write failed: " + errno_text());
  };
  const uint64_t header_len = text.size();
  write(&header_len, 8);
  write(text.data(), text.size());
  for (const auto& t : tensors) {
    at::Tensor cpu;
    try {
      cpu = t.produce().detach().to(at::kCPU).contiguous();
    } catch (...) {  // e.g. a gather that failed: its error, as it is, after the cleanup
      std::fclose(f);
      std::remove(tmp.c_str());
      throw;
    }
    if (cpu.scalar_type() != t.dtype || cpu.sizes().vec() != t.shape)
      abandon("tensor \"" + t.name + "\" came out other than declared");
    write(cpu.data_ptr(), static_cast<size_t>(cpu.numel()) * cpu.element_size());
  }
  if (std::fflush(f) != 0 || fsync(fileno(f)) != 0) abandon("flush failed: " + errno_text());
  std::fclose(f);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail(path, "cannot rename " + tmp + " into place: " + errno_text());
  }
  return digest.hex();
}

}  // namespace kubetune::io
