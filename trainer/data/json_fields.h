#pragma once
// Typed access to record fields with error messages that name the field, e.g.
//   field "messages[2].content": expected a string, got null

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::data {

// The field `key` of `object`; throws when missing. `name` is how the message calls the field.
const nlohmann::json& require_field(const nlohmann::json& object, const std::string& key,
                                    const std::string& name);
const std::string& require_string(const nlohmann::json& value, const std::string& name);
const nlohmann::json& require_array(const nlohmann::json& value, const std::string& name);

}  // namespace kubetune::data
