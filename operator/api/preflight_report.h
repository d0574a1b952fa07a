// The report of `kubetune-trainer preflight` as the operator and `kubetune run` read it: the
// schema's type api::PreflightReport (common/finetunejob_schema.json, status.preflight.report),
// the same one the trainer writes. policy/preflight_summary.h puts it in one line for people.
#pragma once

#include <optional>
#include <string>

#include "common/finetunejob_types.h"

namespace kubetune::op {

// The report in a pod's termination message or on the trainer's stdout; nullopt when the text is
// no JSON object or breaks the schema (types, lengths, list sizes): anything in the pod can write
// it, so nothing in it is trusted.
std::optional<api::PreflightReport> parse_preflight_report(const std::string& text);

}  // namespace kubetune::op
