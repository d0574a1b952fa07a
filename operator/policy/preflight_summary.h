// The preflight's report in one line for people: the reconciler puts it in status.preflight and
// the PreflightPassed condition, `kubetune run` prints it.
#pragma once

#include <optional>
#include <string>

#include "common/finetunejob_types.h"

namespace kubetune::op {

// "1499 steps, 2998 records, 137908 tokens, micro-batch 4 x 2 accumulation,
// est. 12.6 GiB per GPU: OK".
std::string preflight_summary(const api::PreflightReport& report);
// The same for a report that could not be read: "no report".
std::string preflight_summary(const std::optional<api::PreflightReport>& report);

}  // namespace kubetune::op
