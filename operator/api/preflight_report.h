// The report of `kubetune-trainer preflight` as the operator and `kubetune run` show it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::op {

// A field of a report that is a string, else `otherwise`: the report comes from a pod's
// termination message, which anything in the pod can write, so nothing in it is trusted.
std::string report_text(const nlohmann::json& report, const char* key,
                        const std::string& otherwise = "");

// One line for people: "1499 steps, 2998 records, 137908 tokens, est. 12.6 GiB per GPU: OK".
std::string preflight_summary(const nlohmann::json& report);

}  // namespace kubetune::op
