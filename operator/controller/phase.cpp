#include "operator/controller/phase.h"

namespace kubetune::op {

std::string_view to_string(Phase phase) {
  switch (phase) {
    case Phase::kNone:
      return "";
    case Phase::kPending:
      return "Pending";
    case Phase::kCreated:
      return "Created";
    case Phase::kRunning:
      return "Running";
    case Phase::kRestarting:
      return "Restarting";
    case Phase::kSuspended:
      return "Suspended";
    case Phase::kSucceeded:
      return "Succeeded";
    case Phase::kFailed:
      return "Failed";
  }
  return "";
}

Phase parse_phase(std::string_view name) {
  for (Phase p : kAllPhases) {
    if (to_string(p) == name) return p;
  }
  return Phase::kNone;
}

}  // namespace kubetune::op
