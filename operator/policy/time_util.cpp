#include "operator/policy/time_util.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace kubetune::op {

std::string format_time(SystemTime t) {
  const std::time_t s = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string format_micro_time(SystemTime t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch());
  const std::time_t s = static_cast<std::time_t>(us.count() / 1000000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[48];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[64];
  std::snprintf(out, sizeof(out), "%s.%06lldZ", buf, static_cast<long long>(us.count() % 1000000));
  return out;
}

SystemTime parse_time(const std::string& text) {
  std::tm tm{};
  int frac_digits = 0;
  char frac[16] = {0};
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec) != 6) {
    throw std::runtime_error("not an RFC 3339 time: \"" + text + "\"");
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto t = std::chrono::system_clock::from_time_t(timegm(&tm));
  const auto dot = text.find('.');
  if (dot != std::string::npos && std::sscanf(text.c_str() + dot + 1, "%15[0-9]", frac) == 1) {
    std::string digits = frac;
    frac_digits = static_cast<int>(digits.size());
    digits = (digits + "000000").substr(0, 6);
    if (frac_digits > 0) t += std::chrono::microseconds(std::stoll(digits));
  }
  return t;
}

std::string format_duration(double seconds) {
  const long total = seconds > 0 ? std::lround(seconds) : 0;
  const long days = total / 86400, hours = total / 3600 % 24, minutes = total / 60 % 60,
             secs = total % 60;
  char text[32];
  if (days > 0) {
    std::snprintf(text, sizeof text, "%ldd%02ldh", days, hours);
  } else if (hours > 0) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", hours, minutes);
  } else if (minutes > 0) {
    std::snprintf(text, sizeof text, "%ldm%02lds", minutes, secs);
  } else {
    std::snprintf(text, sizeof text, "%lds", secs);
  }
  return text;
}

}  // namespace kubetune::op
