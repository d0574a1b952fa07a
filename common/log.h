// Structured logs for both binaries, on spdlog's default logger (stderr): a timestamp (UTC), the
// level, the component and, in a trainer rank, its rank, then the message, whose key=value pairs
// (step=12 loss=0.41) a log pipeline can pick out. `--log-format json` writes one JSON object per
// line instead ({"time", "level", "component", "rank", "msg"}) for cluster log pipelines.
//
// Code that includes LibTorch logs through log::info() << ... below rather than spdlog's macros:
// LibTorch ships its own copy of {fmt}, which spdlog's headers must not meet (they are built
// against Debian's), so spdlog stays inside log.cpp for those files.
#pragma once

#include <sstream>
#include <string>

namespace kubetune::log {

enum class Level { kInfo, kWarn, kError };

// Writes one message through the default logger.
void write(Level level, const std::string& message);

// A message built with <<, written when the statement ends:
//   log::info() << "checkpoint step=" << step << " path=" << path;
class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  Line(const Line&) = delete;
  Line& operator=(const Line&) = delete;
  ~Line() { write(level_, out_.str()); }
  template <class T>
  Line& operator<<(const T& value) {
    out_ << value;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream out_;
};
inline Line info() { return Line(Level::kInfo); }
inline Line warn() { return Line(Level::kWarn); }
inline Line error() { return Line(Level::kError); }

// printf's %.<digits>f and %.<digits>g, for numbers in messages.
std::string fixed(double value, int digits);
std::string general(double value, int digits);

enum class Format { kText, kJson };

// "text" or "json"; std::invalid_argument naming the value otherwise.
Format parse_format(const std::string& name);

// The format from $KUBETUNE_LOG_FORMAT (how the launcher passes --log-format to its ranks), text
// when unset.
Format format_from_env();

// Configures the default logger. `component` names the binary ("trainer", "launcher",
// "operator"); the rank comes from $RANK when set. Also exports $KUBETUNE_LOG_FORMAT so that
// child processes log alike.
void setup(Format format, const std::string& component);

}  // namespace kubetune::log
