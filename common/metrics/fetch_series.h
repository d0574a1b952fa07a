#pragma once

#include <string_view>

// The series kubetune-fetch (fetch/kubetune_fetch/metrics.py) serves on --metrics-port while it
// downloads, one per source (label `source`): the operator reads them into
// status.preflight.fetch. The Python tool spells the same names; the end-to-end test reads them
// through the operator.
namespace kubetune::metrics::fetch_series {

inline constexpr std::string_view kBytes = "kubetune_fetch_bytes";
inline constexpr std::string_view kTotalBytes = "kubetune_fetch_total_bytes";
inline constexpr std::string_view kBytesPerSecond = "kubetune_fetch_bytes_per_second";
inline constexpr std::string_view kEtaSeconds = "kubetune_fetch_eta_seconds";

}  // namespace kubetune::metrics::fetch_series
