// The safetensors format: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw tensor bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace kubetune::io {

// A memory-mapped safetensors file. Tensors are zero-copy CPU views into the mapping (which they
// keep alive); the mapping is private copy-on-write, so writing into a view never touches the
// file. Copy or convert at the call site.
class SafetensorsFile {
 public:
  // Throws std::runtime_error naming the file for a missing file, a truncated file, a malformed
  // header (or a repeated key in it), unknown dtypes, or tensors that do not tile the data section
  // exactly (overlaps, gaps, trailing bytes).
  explicit SafetensorsFile(const std::string& path);
  std::vector<std::string> names() const;  // in file order (by data offset)
  bool contains(const std::string& name) const;
  at::Tensor tensor(const std::string& name) const;  // throws naming file and tensor if absent
  const nlohmann::json& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  struct Mapping;
  struct Entry {
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    size_t begin, end;  // byte offsets inside the data section
  };
  static Entry read_entry(const nlohmann::json& header_entry);
  void check_layout(size_t data_size) const;
  std::string path_;
  std::shared_ptr<Mapping> map_;
  std::map<std::string, Entry> entries_;
  nlohmann::json metadata_ = nlohmann::json::object();
};

// Writes `path` atomically (a temporary file in the same folder, fsync, rename). Tensors may live
// on any device and be non-contiguous; they are copied to the CPU one at a time. Returns the
// file's XXH3-64 (file_digest.h), computed from the bytes as they are written.
std::string save_safetensors(const std::string& path,
                             const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// A tensor declared by its dtype and shape, produced only when the file reaches it: a file can
// then hold more than memory does at once (the outputs of fully sharded weights, gathered layer by
// layer). `produce` is called once, in order, and must return that dtype and shape.
struct DeferredTensor {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  std::function<at::Tensor()> produce;
};
std::string save_safetensors(const std::string& path, const std::vector<DeferredTensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});

// "F32", "BF16", ... <-> at::ScalarType; throw for types safetensors cannot hold.
std::string safetensors_dtype_name(at::ScalarType t);
at::ScalarType safetensors_dtype(const std::string& name);

}  // namespace kubetune::io
