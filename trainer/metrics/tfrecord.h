// TFRecord framing, the container of TensorBoard event files: each record is its length (uint64,
// little-endian), the masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the
// data.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace kubetune::metrics {

// CRC-32C (Castagnoli), as TensorFlow's crc32c::Value.
uint32_t crc32c(const void* data, size_t size);
// TFRecord stores CRCs masked, so that a CRC of data that holds CRCs stays well distributed.
uint32_t masked_crc32c(const void* data, size_t size);

// Appends one framed record to `out`.
void write_tfrecord(std::ostream& out, const std::string& data);

}  // namespace kubetune::metrics
