// How the generated types (common/finetunejob_types.h, operator/kube/kube_types.h) read and write
// their fields:
// the few rules of the Kubernetes JSON conventions that nlohmann::json does not have by itself.
#pragma once

#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kubetune::api {

// A field that is absent (or null) keeps the member's default: the schema's default, or nullopt.
template <class T>
void read_field(const nlohmann::json& j, const char* key, T& out) {
  const auto it = j.find(key);
  if (it != j.end() && !it->is_null()) it->get_to(out);
}

template <class T>
void read_field(const nlohmann::json& j, const char* key, std::optional<T>& out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  out = it->template get<T>();
}

// kWhenEmpty: a field the schema neither requires nor defaults is left out while it holds nothing:
// an optional not set, an empty list or map, a struct equal to a default-constructed one (a
// volume's hostPath when it uses a persistentVolumeClaim). So an object written back is the
// object that was read.
// kWhenNothing (the Kubernetes types): left out while it writes as nothing (an empty object or
// list). Not "equal to a default-constructed one": a pod spec with no containers writes as
// {"containers": []}, which is something.
enum class Omit { kNever, kWhenEmpty, kWhenNothing };

template <class T>
void write_field(nlohmann::json& j, const char* key, const T& value, Omit omit) {
  nlohmann::json v = value;
  if (omit == Omit::kWhenEmpty && v == nlohmann::json(T{})) return;
  if (omit == Omit::kWhenNothing && (v.is_null() || ((v.is_object() || v.is_array()) && v.empty())))
    return;
  j[key] = std::move(v);
}

template <class T>
void write_field(nlohmann::json& j, const char* key, const std::optional<T>& value, Omit omit) {
  if (value) {
    j[key] = *value;
  } else if (omit == Omit::kNever) {
    j[key] = nullptr;
  }
}

// A string that is not one of the enum's values (the schema's `enum`).
template <class Enum>
void parse_enum(const nlohmann::json& j, const char* type, Enum& out) {
  if (!j.is_string() || !parse(j.get_ref<const std::string&>(), out)) {
    throw std::invalid_argument(std::string(type) + ": unknown value " + j.dump());
  }
}

// What a generated Kubernetes type keeps of `j` beside its members, so that writing the object
// back gives the object read: the members that are not among `known` (another controller's, a
// newer server's), and the known ones that are an empty object or list (`lastState: {}`,
// `containers: []`), which the member alone would leave out when written. A member the code fills
// in is written over its kept empty value.
inline nlohmann::json unknown_members(const nlohmann::json& j,
                                      std::initializer_list<const char*> known) {
  nlohmann::json rest = nlohmann::json::object();
  if (!j.is_object()) return rest;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool named = false;
    for (const char* k : known) named = named || it.key() == k;
    const bool empty_container = (it->is_object() || it->is_array()) && it->empty();
    if (!named || empty_container) rest[it.key()] = it.value();
  }
  return rest;
}

}  // namespace kubetune::api
