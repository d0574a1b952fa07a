// RFC 3339 timestamps as Kubernetes writes them (metav1.Time, metav1.MicroTime).
#pragma once

#include <chrono>
#include <string>

namespace kubetune::op {

using SystemTime = std::chrono::system_clock::time_point;

std::string format_time(SystemTime t);        // 2024-05-01T12:00:00Z
std::string format_micro_time(SystemTime t);  // 2024-05-01T12:00:00.000000Z
// Parses both forms; throws std::runtime_error naming the text when it is neither.
SystemTime parse_time(const std::string& text);
// A duration for people, to the minute above an hour: 45s, 12m30s, 2h05m, 3d04h.
std::string format_duration(double seconds);

}  // namespace kubetune::op
