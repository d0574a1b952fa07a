// The model's parameters by name, as Hugging Face names them ("model.layers.3.mlp.up_proj.weight").
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kubetune::model {

struct NamedParams {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
};

// The decoder layer a parameter belongs to: l for "model.layers.<l>.…", none for the rest (the
// embedding, the final norm, the output layer).
inline std::optional<int64_t> decoder_layer_of(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  return std::stoll(name.substr(prefix.size()));
}

}  // namespace kubetune::model
