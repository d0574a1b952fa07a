#include "trainer/metrics/tfrecord.h"

#include <array>

namespace kubetune::metrics {
namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected poly
    table[i] = c;
  }
  return table;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

void write_tfrecord(std::ostream& out, const std::string& data) {
  std::string header;
  put_le(header, data.size(), 8);
  std::string frame = header;
  put_le(frame, masked_crc32c(header.data(), header.size()), 4);
  frame += data;
  put_le(frame, masked_crc32c(data.data(), data.size()), 4);
  out.write(frame.data(), static_cast<std::streamsize>(frame.size()));
}

}  // namespace kubetune::metrics
