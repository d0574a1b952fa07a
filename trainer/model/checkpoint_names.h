// Where each of the model's parameters lives in a Hugging Face checkpoint. Most live under their
// own name. A mixture of experts' stacks (experts.h) are stored one tensor per expert and linear
// on the Hub and by transformers' save_pretrained (model.layers.0.mlp.experts.3.gate_proj.weight,
// Mixtral's model.layers.0.block_sparse_moe.experts.3.w1.weight), and Mixtral's router as
// block_sparse_moe.gate.weight; gpt-oss stores each stack whole under its own name, transposed.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/model/model_config.h"

namespace kubetune::model {

struct StoredSlice {
  std::string name;     // the checkpoint's tensor
  int64_t expert = -1;  // the expert of the stack it holds; -1: it is the whole parameter
  // The rows of that expert's [out, in] it holds (gate and up share gate_up_proj).
  int64_t first_row = 0, rows = 0;
  // The whole stack, stored as [E, in, out] (gpt-oss: family.h, stored_transposed).
  bool transposed = false;
};

// The checkpoint tensors that make up `parameter` (a full name, "model.layers.0.mlp.gate.weight"),
// in order.
std::vector<StoredSlice> stored_slices(const ModelConfig& c, const std::string& parameter);

// The part of `value` (the parameter's value) that `slice` holds.
at::Tensor slice_of(const at::Tensor& value, const StoredSlice& slice);

}  // namespace kubetune::model
