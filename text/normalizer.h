// tokenizer.json "normalizer": NFC/NFD/NFKC/NFKD, Prepend, Replace, Sequence (null = none).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "text/normalized.h"

namespace kubetune::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(Normalized& n) const = 0;
};

// Builds the normalizer described by `config` (null -> nullptr). `where` names the JSON field in
// error messages, e.g. "model/tokenizer.json: normalizer".
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config, const std::string& where);

}  // namespace kubetune::text
