#include "trainer/data/jsonl_reader.h"

#include <stdexcept>

#include "common/strict_json.h"

namespace kubetune::data {
namespace {

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

}  // namespace

JsonlReader::JsonlReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  if (!in_) throw std::runtime_error(path + ": cannot open dataset file");
  // Most Hub datasets are Parquet: say what to do rather than fail on its first binary byte.
  char magic[4] = {};
  in_.read(magic, sizeof magic);
  if (in_.gcount() == 4 && std::string(magic, 4) == "PAR1")
    throw std::runtime_error(
        path +
        ": a Parquet file, and data.train and data.validation are read as JSONL: give it as an "
        "hf:// or s3:// source (the fetch initializer reads Parquet as JSONL), or convert it with "
        "`python3 -m kubetune_fetch.parquet " +
        path + "` (fetch/)");
  in_.clear();
  in_.seekg(0);
}

std::string JsonlReader::where() const { return path_ + ":" + std::to_string(line_); }

bool JsonlReader::next(nlohmann::json& record) {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_;
    if (is_blank(line)) continue;
    // A NUL is never part of a JSON text; some readers stop at it and drop the rest silently.
    if (const size_t nul = line.find('\0'); nul != std::string::npos)
      throw std::runtime_error(where() + ": NUL byte at column " + std::to_string(nul + 1) +
                               " (binary data, or a file in UTF-16?)");
    record = parse_json_strict(line, where());
    if (!record.is_object()) {
      throw std::runtime_error(where() + ": expected a JSON object per line, got " +
                               std::string(record.type_name()));
    }
    return true;
  }
  if (in_.bad())
    throw std::runtime_error(path_ + ": read error after line " + std::to_string(line_));
  return false;
}

}  // namespace kubetune::data
