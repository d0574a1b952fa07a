#include "api_error.h"

namespace kubetune::kubefake {

ApiError::ApiError(int code, std::string reason, const std::string& message, nlohmann::json details)
    : std::runtime_error(message),
      code_(code),
      reason_(std::move(reason)),
      details_(std::move(details)) {}

nlohmann::json ApiError::status() const { return make_status(code_, reason_, what(), details_); }

nlohmann::json make_status(int code, const std::string& reason, const std::string& message,
                           const nlohmann::json& details) {
  nlohmann::json status = {{"kind", "Status"},
                           {"apiVersion", "v1"},
                           {"metadata", nlohmann::json::object()},
                           {"status", code < 400 ? "Success" : "Failure"},
                           {"message", message},
                           {"reason", reason},
                           {"code", code}};
  if (!details.is_null()) status["details"] = details;
  return status;
}

std::string qualified_resource(const ResourceInfo& info) {
  return info.group.empty() ? info.plural : info.plural + "." + info.group;
}

static nlohmann::json details_for(const ResourceInfo& info, const std::string& name) {
  return {{"name", name}, {"group", info.group}, {"kind", info.plural}};
}

ApiError not_found(const ResourceInfo& info, const std::string& name) {
  return ApiError(404, "NotFound", qualified_resource(info) + " \"" + name + "\" not found",
                  details_for(info, name));
}

ApiError already_exists(const ResourceInfo& info, const std::string& name) {
  return ApiError(409, "AlreadyExists",
                  qualified_resource(info) + " \"" + name + "\" already exists",
                  details_for(info, name));
}

ApiError conflict(const ResourceInfo& info, const std::string& name) {
  return ApiError(409, "Conflict",
                  "Operation cannot be fulfilled on " + qualified_resource(info) + " \"" + name +
                      "\": the object has been modified; please apply your changes to the latest "
                      "version and try again",
                  details_for(info, name));
}

ApiError invalid(const ResourceInfo& info, const std::string& name, const std::string& field,
                 const std::string& why) {
  nlohmann::json details = {
      {"name", name},
      {"group", info.group},
      {"kind", info.kind},
      {"causes", {{{"reason", "FieldValueInvalid"}, {"message", why}, {"field", field}}}}};
  return ApiError(422, "Invalid", info.kind + " \"" + name + "\" is invalid: " + field + ": " + why,
                  details);
}

ApiError bad_request(const std::string& message) { return ApiError(400, "BadRequest", message); }

ApiError expired(const std::string& message) { return ApiError(410, "Expired", message); }

ApiError page_not_found() {
  return ApiError(404, "NotFound", "the server could not find the requested resource");
}

}  // namespace kubetune::kubefake
