#pragma once
// PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and strategic merge patch,
// which the fake treats as a merge patch (equal for the maps the operator patches: labels,
// annotations, status; lists are replaced rather than merged by key).
#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::kubefake {

// Returns `current` with the patch applied. Throws ApiError 415 for an unknown content type, 400
// for a malformed patch body, 422 when a JSON patch operation cannot be applied.
nlohmann::json apply_patch(const nlohmann::json& current, const std::string& content_type,
                           const std::string& patch_body);

}  // namespace kubetune::kubefake
