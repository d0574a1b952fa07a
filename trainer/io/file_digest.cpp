#include "trainer/io/file_digest.h"

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <vector>

// Header-only: the hash is compiled in, so the trainer image needs no extra shared library.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kubetune::io {

struct Xxh3::State {
  XXH3_state_t s;
};

Xxh3::Xxh3() : state_(std::make_unique<State>()) { XXH3_64bits_reset(&state_->s); }
Xxh3::~Xxh3() = default;
Xxh3::Xxh3(Xxh3&&) noexcept = default;
Xxh3& Xxh3::operator=(Xxh3&&) noexcept = default;

void Xxh3::update(const void* data, size_t size) { XXH3_64bits_update(&state_->s, data, size); }

std::string Xxh3::hex() const {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits_digest(&state_->s)));
  return out;
}

std::string file_xxh3(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  Xxh3 digest;
  std::vector<char> buffer(8 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    digest.update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return digest.hex();
}

}  // namespace kubetune::io
