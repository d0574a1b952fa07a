// metav1.Condition bookkeeping, as apimachinery's meta.SetStatusCondition: lastTransitionTime
// changes only when status flips, so "since when" stays true across repeated reconciles.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "operator/controller/time_util.h"

namespace kubetune::op {

// Condition types of a FineTuneJob.
// False (reason Checking) while the preflight pod runs; True once it passed for this spec.
inline constexpr const char* kCondPreflightPassed = "PreflightPassed";
inline constexpr const char* kCondCreated = "Created";
inline constexpr const char* kCondRunning = "Running";
inline constexpr const char* kCondRestarting = "Restarting";
inline constexpr const char* kCondSucceeded = "Succeeded";
inline constexpr const char* kCondFailed = "Failed";
inline constexpr const char* kCondSuspended = "Suspended";

// Sets (adds or updates) condition `type` in status["conditions"].
void set_condition(nlohmann::json& status, const std::string& type, bool value,
                   const std::string& reason, const std::string& message, long generation,
                   SystemTime now);

// The condition of that type, or null.
nlohmann::json find_condition(const nlohmann::json& status, const std::string& type);
bool condition_is_true(const nlohmann::json& status, const std::string& type);

}  // namespace kubetune::op
