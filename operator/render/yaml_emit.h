// Writes JSON as block-style YAML, deterministically (keys in sorted order), for the CRD the
// operator prints and the objects `kubetune render` shows. Strings are quoted whenever a YAML
// reader could take them for something else (a number, a boolean, null, a flow collection...).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace kubetune::op {

std::string json_to_yaml(const nlohmann::json& value);

// The FineTuneJob CRD (api/crd.h) as `kubetune-operator crd` prints it: the checked-in
// charts/kubetune/crds/finetunejobs.yaml.
std::string crd_yaml();

}  // namespace kubetune::op
