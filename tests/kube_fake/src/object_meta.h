#pragma once
// Server-owned metadata: uids, timestamps, generated names, name validation, and helpers to read
// metadata fields from JSON objects without tripping over missing keys.
#include <nlohmann/json.hpp>
#include <string>

#include "resource_registry.h"

namespace kubetune::kubefake {

std::string new_uid();                           // random RFC 4122 version-4 UUID
std::string now_rfc3339();                       // e.g. "2024-05-01T12:00:00Z" (UTC, seconds)
std::string generated_suffix();                  // 5 chars from the apiserver's name alphabet
bool is_dns_subdomain(const std::string& name);  // RFC 1123 subdomain, at most 253 chars

// metadata.<field> as a string, "" when absent.
std::string meta_string(const nlohmann::json& object, const char* field);
nlohmann::json& meta(nlohmann::json& object);  // creates metadata when missing

// Parses a resourceVersion query/metadata value; throws ApiError 400 when not a number.
uint64_t parse_resource_version(const std::string& text);

// Checks the body's kind/apiVersion (when given) against the resource; sets them when missing.
void check_and_fill_type(nlohmann::json& object, const ResourceInfo& info);

}  // namespace kubetune::kubefake
