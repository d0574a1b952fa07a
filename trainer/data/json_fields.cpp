#include "trainer/data/json_fields.h"

#include <stdexcept>

namespace kubetune::data {
namespace {

[[noreturn]] void wrong_type(const nlohmann::json& value, const std::string& name,
                             const char* expected) {
  throw std::runtime_error("field \"" + name + "\": expected " + expected + ", got " +
                           value.type_name());
}

}  // namespace

const nlohmann::json& require_field(const nlohmann::json& object, const std::string& key,
                                    const std::string& name) {
  const auto it = object.find(key);
  if (it == object.end()) throw std::runtime_error("field \"" + name + "\": missing");
  return *it;
}

const std::string& require_string(const nlohmann::json& value, const std::string& name) {
  if (!value.is_string()) wrong_type(value, name, "a string");
  return value.get_ref<const std::string&>();
}

const nlohmann::json& require_array(const nlohmann::json& value, const std::string& name) {
  if (!value.is_array()) wrong_type(value, name, "an array");
  return value;
}

}  // namespace kubetune::data
