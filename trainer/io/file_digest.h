// XXH3-64 checksums of files, printed as `xxhsum -H3` prints them (16 hex digits): fast enough
// (tens of GB/s) to cover every byte of a multi-GB checkpoint.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace kubetune::io {

// A running checksum over bytes given in pieces (a file as it is written).
class Xxh3 {
 public:
  Xxh3();
  ~Xxh3();
  Xxh3(Xxh3&&) noexcept;
  Xxh3& operator=(Xxh3&&) noexcept;
  void update(const void* data, size_t size);
  std::string hex() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The checksum of a whole file; throws std::runtime_error naming it if it cannot be read.
std::string file_xxh3(const std::string& path);

}  // namespace kubetune::io
