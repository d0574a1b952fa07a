#pragma once
// Reads a JSONL file one record at a time, keeping track of the line number for error messages.

#include <cstddef>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::data {

class JsonlReader {
 public:
  // Throws std::runtime_error("path: cannot open ...") when the file cannot be read.
  explicit JsonlReader(const std::string& path);

  // Parses the next non-blank line into `record`; false at end of file. Throws
  // std::runtime_error("path:LINE: ...") for invalid JSON or a record that is not an object.
  bool next(nlohmann::json& record);

  size_t line() const { return line_; }  // 1-based line of the last record returned
  std::string where() const;             // "path:LINE", the prefix of every record error

 private:
  std::string path_;
  std::ifstream in_;
  size_t line_ = 0;
};

}  // namespace kubetune::data
