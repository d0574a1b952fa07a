#include "common/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <ctime>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace kubetune::log {
namespace {

std::string rank_from_env() {
  const char* rank = std::getenv("RANK");
  return rank ? rank : "";
}

std::string utc_time(const spdlog::log_clock::time_point& t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  const std::time_t seconds = spdlog::log_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

// One JSON object per line; nlohmann::json escapes the message.
class JsonFormatter : public spdlog::formatter {
 public:
  JsonFormatter(std::string component, std::string rank)
      : component_(std::move(component)), rank_(std::move(rank)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::json line = {{"time", utc_time(msg.time)},
                           {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                                                 spdlog::level::to_string_view(msg.level).size())},
                           {"component", component_},
                           {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    if (!rank_.empty()) line["rank"] = std::stoi(rank_);
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(component_, rank_);
  }

 private:
  std::string component_, rank_;
};

}  // namespace

void write(Level level, const std::string& message) {
  switch (level) {
    case Level::kInfo:
      spdlog::info("{}", message);
      break;
    case Level::kWarn:
      spdlog::warn("{}", message);
      break;
    case Level::kError:
      spdlog::error("{}", message);
      break;
  }
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

std::string general(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, value);
  return buf;
}

Format parse_format(const std::string& name) {
  if (name == "text") return Format::kText;
  if (name == "json") return Format::kJson;
  throw std::invalid_argument("log format \"" + name + "\": expected text or json");
}

Format format_from_env() {
  const char* v = std::getenv("KUBETUNE_LOG_FORMAT");
  return v && *v ? parse_format(v) : Format::kText;
}

void setup(Format format, const std::string& component) {
  spdlog::drop("kubetune-" + component);  // set up again (tests, the launcher)
  auto logger = spdlog::stderr_logger_mt("kubetune-" + component);
  const std::string rank = rank_from_env();
  if (format == Format::kJson) {
    logger->set_formatter(std::make_unique<JsonFormatter>(component, rank));
  } else {
    const std::string who = component + (rank.empty() ? "" : " rank=" + rank);
    logger->set_formatter(std::make_unique<spdlog::pattern_formatter>(
        "%Y-%m-%dT%H:%M:%S.%eZ %-5l " + who + ": %v", spdlog::pattern_time_type::utc));
  }
  logger->flush_on(spdlog::level::info);  // pods are killed, not shut down politely
  spdlog::set_default_logger(logger);
  setenv("KUBETUNE_LOG_FORMAT", format == Format::kJson ? "json" : "text", 1);
}

}  // namespace kubetune::log
