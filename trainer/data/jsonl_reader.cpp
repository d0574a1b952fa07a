#include "trainer/data/jsonl_reader.h"

#include <stdexcept>

namespace kubetune::data {
namespace {

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; users do not need that.
std::string without_exception_tag(const std::string& what) {
  if (!what.empty() && what.front() == '[') {
    const size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

}  // namespace

JsonlReader::JsonlReader(const std::string& path) : path_(path), in_(path, std::ios::binary) {
  if (!in_) throw std::runtime_error(path + ": cannot open dataset file");
}

std::string JsonlReader::where() const { return path_ + ":" + std::to_string(line_); }

bool JsonlReader::next(nlohmann::json& record) {
  std::string line;
  while (std::getline(in_, line)) {
    ++line_;
    if (is_blank(line)) continue;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw std::runtime_error(where() + ": invalid JSON: " + without_exception_tag(e.what()));
    }
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
