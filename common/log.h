// Structured logs for both binaries, on spdlog's default logger (stderr): a timestamp (UTC), the
// level, the component and, in a trainer rank, its rank, then the message, whose key=value pairs
// (step=12 loss=0.41) a log pipeline can pick out. `--log-format json` writes one JSON object per
// line instead ({"time", "level", "component", "rank", "msg"}) for cluster log pipelines.
#pragma once

#include <string>

namespace kubetune::log {

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
