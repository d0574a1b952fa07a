#include "object_meta.h"

#include <chrono>
#include <ctime>
#include <mutex>
#include <random>

#include "api_error.h"

namespace kubetune::kubefake {
namespace {

std::mt19937_64& rng() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}

std::mutex& rng_mutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::string new_uid() {
  std::lock_guard<std::mutex> lock(rng_mutex());
  std::uniform_int_distribution<int> hex(0, 15);
  const char* digits = "0123456789abcdef";
  std::string uid;
  for (int i = 0; i < 36; ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      uid += '-';
    } else if (i == 14) {
      uid += '4';  // version 4
    } else if (i == 19) {
      uid += digits[8 + hex(rng()) % 4];  // variant 10xx
    } else {
      uid += digits[hex(rng())];
    }
  }
  return uid;
}

std::string now_rfc3339() {
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string generated_suffix() {
  // The apiserver's alphabet: no vowels (no accidental words) and no look-alike characters.
  static const std::string alphabet = "bcdfghjklmnpqrstvwxz2456789";
  std::lock_guard<std::mutex> lock(rng_mutex());
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string suffix;
  for (int i = 0; i < 5; ++i) suffix += alphabet[pick(rng())];
  return suffix;
}

bool is_dns_subdomain(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (alnum(c) || c == '-') continue;
    if (c == '.' && alnum(name[i - 1]) && alnum(name[i + 1])) continue;
    return false;
  }
  return true;
}

std::string meta_string(const nlohmann::json& object, const char* field) {
  if (!object.is_object() || !object.contains("metadata")) return "";
  const nlohmann::json& metadata = object["metadata"];
  if (!metadata.is_object() || !metadata.contains(field) || !metadata[field].is_string()) return "";
  return metadata[field].get<std::string>();
}

nlohmann::json& meta(nlohmann::json& object) {
  if (!object.contains("metadata") || !object["metadata"].is_object()) {
    object["metadata"] = nlohmann::json::object();
  }
  return object["metadata"];
}

uint64_t parse_resource_version(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 19) {
    throw bad_request("invalid resource version: \"" + text + "\"");
  }
  return std::stoull(text);
}

void check_and_fill_type(nlohmann::json& object, const ResourceInfo& info) {
  if (object.contains("apiVersion") && object["apiVersion"] != info.api_version()) {
    throw bad_request("the API version in the data (" + object["apiVersion"].dump() +
                      ") does not match the expected API version (" + info.api_version() + ")");
  }
  if (object.contains("kind") && object["kind"] != info.kind) {
    throw bad_request("the kind in the data (" + object["kind"].dump() +
                      ") does not match the expected kind (" + info.kind + ")");
  }
  object["apiVersion"] = info.api_version();
  object["kind"] = info.kind;
}

}  // namespace kubetune::kubefake
